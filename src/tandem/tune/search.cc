#include "tandem/tune/search.h"
#include "tandem/base/detail/json_number.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "tandem/base/atomic_file.h"
#include "tandem/base/detail/json_integer.h"
#include "tandem/base/error.h"
#include "tandem/base/text_file.h"
#include "tandem/tune/asha.h"

namespace tandem::tune {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kStateFile = "search.json";
constexpr const char* kFormat = "tandem-search/1";
// A trial's record is a few hundred bytes and its curve a number per epoch.
constexpr std::uintmax_t kMaxStateBytes = std::uintmax_t{1} << 30;

AshaOptions asha_options(const SearchSettings& s) {
  return {.trials = s.trials,
          .min_epochs = s.min_epochs,
          .max_epochs = s.max_epochs,
          .reduction_factor = s.reduction_factor,
          .maximize = s.maximize,
          .successive_halving = s.scheduler == "asha"};
}

std::vector<double> numbers(const nlohmann::json& array) {
  std::vector<double> v;
  for (const nlohmann::json& x : array)
    v.push_back(x.is_number() ? x.get<double>() : std::numeric_limits<double>::quiet_NaN());
  return v;
}

nlohmann::json numbers_json(const std::vector<double>& v) {
  nlohmann::json array = nlohmann::json::array();
  for (double x : v) array.push_back(tandem::detail::number_or_null(x));
  return array;
}

struct SavedState {
  std::string space_text;
  std::vector<std::string> trial_arguments;
  bool arguments_recorded = true;  // false: a state of an earlier version
  AshaOptions asha;
  std::vector<TrialRecord> trials;
  double wall_seconds = 0.0;
};

void write_state(const std::string& output_dir, const SavedState& state) {
  nlohmann::json trials = nlohmann::json::array();
  for (const TrialRecord& r : state.trials) {
    nlohmann::json settings = nlohmann::json::array();
    for (const auto& [name, value] : r.settings) settings.push_back({name, value});
    trials.push_back({{"settings", settings},
                      {"seed", r.seed},
                      {"results", numbers_json(r.results)},
                      {"started_rung", r.started_rung},
                      {"failed", r.failed},
                      {"error", r.error},
                      {"curve", numbers_json(r.curve)},
                      {"seconds", r.seconds}});
  }
  const AshaOptions& a = state.asha;
  const nlohmann::json json = {{"format", kFormat},
                               {"space", state.space_text},
                               {"trial_arguments", state.trial_arguments},
                               {"asha",
                                {{"min_epochs", a.min_epochs},
                                 {"max_epochs", a.max_epochs},
                                 {"reduction_factor", a.reduction_factor},
                                 {"maximize", a.maximize},
                                 {"successive_halving", a.successive_halving}}},
                               {"wall_seconds", state.wall_seconds},
                               {"trials", trials}};
  // Atomically, so that an interruption leaves the old state whole.
  const std::string text = json.dump(1) + "\n";
  const std::string_view parts[] = {text};
  write_file_atomically((fs::path(output_dir) / kStateFile).string(), parts, "search state");
}

SavedState read_state(const std::string& output_dir) {
  const fs::path path = fs::path(output_dir) / kStateFile;
  const std::string text = read_text_file(path.string(), "search state", kMaxStateBytes);
  SavedState state;
  try {
    const nlohmann::json json = nlohmann::json::parse(text);
    if (json.at("format") != kFormat) throw std::runtime_error("unknown format");
    state.space_text = json.at("space").get<std::string>();
    // Absent from the states of earlier versions: not checked then.
    state.arguments_recorded = json.contains("trial_arguments");
    if (state.arguments_recorded)
      state.trial_arguments = json.at("trial_arguments").get<std::vector<std::string>>();
    const nlohmann::json& a = json.at("asha");
    // Integers through json_integer: a float no int64 holds was a cast of
    // undefined behaviour.
    using tandem::detail::json_integer;
    state.asha = {
        .min_epochs = json_integer<int64_t>(a.at("min_epochs"), "min_epochs"),
        .max_epochs = json_integer<int64_t>(a.at("max_epochs"), "max_epochs"),
        .reduction_factor = json_integer<int64_t>(a.at("reduction_factor"), "reduction_factor"),
        .maximize = a.at("maximize").get<bool>(),
        .successive_halving = a.at("successive_halving").get<bool>()};
    state.wall_seconds = json.at("wall_seconds").get<double>();
    for (const nlohmann::json& t : json.at("trials")) {
      TrialRecord r;
      for (const nlohmann::json& s : t.at("settings"))
        r.settings.emplace_back(s.at(0).get<std::string>(), s.at(1).get<std::string>());
      r.seed = json_integer<uint64_t>(t.at("seed"), "seed");
      r.results = numbers(t.at("results"));
      r.started_rung = json_integer<int64_t>(t.at("started_rung"), "started_rung");
      r.failed = t.at("failed").get<bool>();
      r.error = t.at("error").get<std::string>();
      r.curve = numbers(t.at("curve"));
      r.seconds = t.at("seconds").get<double>();
      state.trials.push_back(std::move(r));
    }
    state.asha.trials = static_cast<int64_t>(state.trials.size());
  } catch (const std::exception& e) {
    TANDEM_THROW(InvalidArgument, "'", path.string(), "' is not a tandem search's state (",
                 e.what(), ")");
  }
  return state;
}

SearchResult result_of(const SavedState& state, AshaScheduler& scheduler) {
  SearchResult result;
  result.trials = state.trials;
  result.rungs = scheduler.rungs();
  const AshaScheduler::Best best = scheduler.best();
  result.best = best.trial;
  result.best_rung = best.rung;
  for (const TrialRecord& r : state.trials) {
    result.epochs_trained += static_cast<int64_t>(r.curve.size());
    result.trial_seconds += r.seconds;
  }
  result.wall_seconds = state.wall_seconds;
  return result;
}

// Folds a job's outcome into its trial's record and the scheduler, and
// says it as a line; returns the outcome's status.
TrialOutcome::Status record_outcome(const TrialJob& job, const TrialOutcome& outcome,
                                    const std::string& metric_name, TrialRecord& record,
                                    AshaScheduler& scheduler,
                                    const std::function<void(const std::string&)>& log) {
  if (!outcome.curve.empty()) record.curve = outcome.curve;
  record.seconds += outcome.seconds;
  const AshaScheduler::Job asha_job{.trial = job.trial, .rung = job.rung, .epochs = job.epochs};
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  switch (outcome.status) {
    case TrialOutcome::Status::finished: {
      // The metric at the rung's last epoch (or the last there is, when the
      // data ran out first).
      const auto epochs = static_cast<size_t>(job.epochs);
      const double metric = record.curve.size() >= epochs ? record.curve[epochs - 1]
                            : record.curve.empty()        ? kNaN
                                                          : record.curve.back();
      scheduler.report(asha_job, metric);
      record.results.push_back(metric);
      log(fmt::format("trial {:3} reached {}: {} {:.4f} ({:.1f} s)", job.trial,
                      budget_point(job.steps_per_epoch, job.epochs), metric_name, metric,
                      outcome.seconds));
      break;
    }
    case TrialOutcome::Status::diverged:
      scheduler.report(asha_job, kNaN);
      record.results.push_back(kNaN);
      record.error = outcome.error;
      log(fmt::format("trial {:3} diverged: {}", job.trial, outcome.error));
      break;
    case TrialOutcome::Status::interrupted:
      log(fmt::format("trial {:3} interrupted", job.trial));
      break;
    case TrialOutcome::Status::failed:
      scheduler.report_failure(asha_job);
      record.failed = true;
      record.error = outcome.error;
      log(fmt::format("trial {:3} failed: {}", job.trial, outcome.error));
      break;
  }
  return outcome.status;
}

// A saved state resumes only the search the space describes: its trials,
// their settings and seeds, and its rungs (a state edited or cut short
// would send the scheduler past the trials it holds), with the trials'
// flags it started with.
void check_resumable(const SavedState& saved, const SavedState& fresh,
                     const std::string& output_dir) {
  const auto refuse = [&](const auto&... what) {
    TANDEM_THROW(InvalidArgument, "the search state in '", output_dir, "' ", what...,
                 "; resume with the state it wrote, or start anew");
  };
  if (saved.trials.size() != fresh.trials.size())
    refuse("holds ", saved.trials.size(), " trials where the space makes ", fresh.trials.size());
  for (size_t t = 0; t < saved.trials.size(); ++t) {
    if (saved.trials[t].settings != fresh.trials[t].settings ||
        saved.trials[t].seed != fresh.trials[t].seed)
      refuse("gives trial ", t, " other settings or another seed than the space");
  }
  const AshaOptions& a = saved.asha;
  const AshaOptions& b = fresh.asha;
  if (a.min_epochs != b.min_epochs || a.max_epochs != b.max_epochs ||
      a.reduction_factor != b.reduction_factor || a.maximize != b.maximize ||
      a.successive_halving != b.successive_halving)
    refuse("schedules other rungs than the space");
  if (saved.arguments_recorded && saved.trial_arguments != fresh.trial_arguments) {
    std::string was, now;
    for (const std::string& flag : saved.trial_arguments) was += " " + flag;
    for (const std::string& flag : fresh.trial_arguments) now += " " + flag;
    TANDEM_THROW(InvalidArgument, "the search at '", output_dir,
                 "' started its trials with the flags", was, "; this command gives", now,
                 "; resume with the same flags, or start anew");
  }
}

// The search's directory checked and created, and its state: the saved one
// on a resume, every trial not started otherwise.
SavedState open_search(const SearchOptions& options) {
  const SearchSettings& settings = options.space.settings;
  const bool exists = fs::exists(fs::path(options.output_dir) / kStateFile);
  if (exists && !options.resume) {
    TANDEM_THROW(InvalidArgument, "'", options.output_dir,
                 "' already holds a search: resume it (--resume) or choose another --output");
  }
  if (!exists && options.resume)
    TANDEM_THROW(InvalidArgument, "no search to resume at '", options.output_dir, "'");
  // A trial directory without the search's state is another search's:
  // its checkpoints would be resumed as this one's.
  if (!exists && fs::exists(trial_dir(options.output_dir, 0))) {
    TANDEM_THROW(InvalidArgument, "'", options.output_dir,
                 "' holds trial directories but no search.json; choose another --output");
  }
  std::error_code error;
  fs::create_directories(options.output_dir, error);
  if (error) {
    TANDEM_THROW(IoError, "cannot create the search directory '", options.output_dir,
                 "': ", error.message());
  }

  SavedState state{.space_text = options.space_text,
                   .trial_arguments = options.trial_arguments,
                   .asha = asha_options(settings)};
  const std::vector<TrialSettings> sampled = sample_trials(options.space);
  for (size_t t = 0; t < sampled.size(); ++t)
    state.trials.push_back({.settings = sampled[t], .seed = settings.seed + t});
  if (options.resume) {
    SavedState saved = read_state(options.output_dir);
    if (saved.space_text != options.space_text) {
      TANDEM_THROW(InvalidArgument, "the space file differs from the one the search at '",
                   options.output_dir, "' started with; resume with that file, or start anew");
    }
    check_resumable(saved, state, options.output_dir);
    state.trials = std::move(saved.trials);
    state.wall_seconds = saved.wall_seconds;
  }
  return state;
}

}  // namespace

std::string trial_dir(const std::string& output_dir, int64_t trial) {
  return (fs::path(output_dir) / fmt::format("trial-{:03}", trial)).string();
}

SearchResult load_search(const std::string& output_dir) {
  const SavedState state = read_state(output_dir);
  AshaScheduler scheduler(state.asha);
  for (size_t t = 0; t < state.trials.size(); ++t) {
    const TrialRecord& r = state.trials[t];
    scheduler.restore(static_cast<int64_t>(t), {r.results, r.started_rung, r.failed});
  }
  return result_of(state, scheduler);
}

SearchResult run_search(const SearchOptions& options, TrialRunner& runner) {
  const SearchSettings& settings = options.space.settings;
  if (options.parallel < 1)
    TANDEM_THROW(InvalidArgument, "a search needs at least one parallel trial, got ",
                 options.parallel);
  SavedState state = open_search(options);
  AshaScheduler scheduler(state.asha);
  for (size_t t = 0; t < state.trials.size(); ++t) {
    const TrialRecord& r = state.trials[t];
    scheduler.restore(static_cast<int64_t>(t), {r.results, r.started_rung, r.failed});
  }
  const std::function<void(const std::string&)> log = [&](const std::string& line) {
    if (options.log) options.log(line);
  };
  const auto start = Clock::now();
  const double wall_before = state.wall_seconds;
  const auto save = [&] {
    state.wall_seconds = wall_before + std::chrono::duration<double>(Clock::now() - start).count();
    write_state(options.output_dir, state);
  };
  save();

  bool any_finished = false;
  for (const TrialRecord& r : state.trials) any_finished = any_finished || !r.results.empty();
  std::optional<std::string> first_error;
  bool interrupted = false;
  int64_t running = 0;
  const auto stop_requested = [&] { return options.stop && options.stop->load(); };
  for (;;) {
    while (!interrupted && !first_error && !stop_requested() && running < options.parallel) {
      const std::optional<AshaScheduler::Job> job = scheduler.next();
      if (!job) break;
      TrialRecord& record = state.trials[static_cast<size_t>(job->trial)];
      record.started_rung = job->rung;
      runner.start({.trial = job->trial,
                    .rung = job->rung,
                    .epochs = job->epochs,
                    .max_epochs = settings.max_epochs,
                    .steps_per_epoch = settings.steps_per_epoch,
                    .settings = record.settings,
                    .seed = record.seed,
                    .dir = trial_dir(options.output_dir, job->trial)});
      ++running;
      log(fmt::format("trial {:3} to {} (rung {}): {}", job->trial,
                      budget_point(settings.steps_per_epoch, job->epochs), job->rung,
                      describe(record.settings)));
      save();
    }
    if (running == 0) break;
    auto [job, outcome] = runner.wait();
    --running;
    TrialRecord& record = state.trials[static_cast<size_t>(job.trial)];
    switch (record_outcome(job, outcome, settings.metric, record, scheduler, log)) {
      case TrialOutcome::Status::finished:
      case TrialOutcome::Status::diverged:
        any_finished = true;
        break;
      case TrialOutcome::Status::interrupted:
        interrupted = true;  // its rung reruns from its checkpoint on resume
        break;
      case TrialOutcome::Status::failed:
        if (!any_finished && !first_error) {
          first_error = fmt::format("trial {} ({}) failed: {}", job.trial,
                                    describe(record.settings), outcome.error);
        }
        break;
    }
    save();
  }
  if (first_error) TANDEM_THROW(Error, *first_error, "; the search stopped");
  SearchResult result = result_of(state, scheduler);
  result.interrupted = interrupted || (stop_requested() && !scheduler.done());
  if (settings.target && result.best >= 0) {
    const double value = state.trials[static_cast<size_t>(result.best)]
                             .results[static_cast<size_t>(result.best_rung)];
    result.target_reached =
        settings.maximize ? value >= *settings.target : value <= *settings.target;
  }
  return result;
}

}  // namespace tandem::tune
