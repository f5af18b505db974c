// `tandem tune search`: a hyperparameter search (tune/search.h) whose
// trials are `tandem train` processes (process_trial_runner.h), one run
// directory each, started `--parallel` at a time; under mpirun on every
// rank's host (mpi_trial_runner.h). Every flag the command does not know
// is a `tandem train` flag, given to every trial.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <csignal>
#include <memory>
#include <optional>

#include "tandem/base/atomic_file.h"
#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/base/host_name.h"
#include "tandem/base/text_file.h"
#include "tandem/cli/commands.h"
#include "tandem/cli/mpi_trial_runner.h"
#include "tandem/cli/process_trial_runner.h"
#include "tandem/comm/launch.h"
#include "tandem/comm/mpi.h"
#include "tandem/monitor/svg_chart.h"
#include "tandem/tune/search.h"

namespace tandem::cli {
namespace {

struct SearchCommandOptions {
  std::string space;
  std::string output;
  int64_t parallel = 0;  // 0: one trial per device
  bool resume = false;
  std::string report;
  std::vector<std::string> train_args;  // the flags the command does not know
};

std::atomic<bool> stop_search{false};

void on_interrupt(int) {
  stop_search.store(true);
}

// "12 epochs", or with budgets in steps "3600 steps".
std::string amount(const tune::SearchSettings& s, int64_t epochs) {
  return s.steps_per_epoch > 0 ? fmt::format("{} steps", epochs * s.steps_per_epoch)
                               : fmt::format("{} epochs", epochs);
}

// A space file is a few lines.
constexpr std::uintmax_t kMaxSpaceBytes = std::uintmax_t{1} << 20;

// The value given for a train flag among the arguments ("--flag V" or
// "--flag=V"), or empty.
std::string flag_value(const std::vector<std::string>& args, const std::string& flag) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag && i + 1 < args.size()) return args[i + 1];
    if (args[i].starts_with(flag + "=")) return args[i].substr(flag.size() + 1);
  }
  return {};
}

bool has_flag(const std::vector<std::string>& args, const std::string& flag) {
  return std::any_of(args.begin(), args.end(),
                     [&](const std::string& a) { return a == flag || a.starts_with(flag + "="); });
}

// Refuses train flags that the search owns or searches, then parses the
// first trial's command line as `tandem train` would, so that a bad flag
// is one error here rather than one per trial.
void check_train_args(const std::vector<std::string>& args, const tune::SearchSpace& space,
                      const tune::TrialSettings& first) {
  for (const char* owned : {"--output", "-o", "--resume", "--epochs", "--stop-after-epochs",
                            "--seed", "--quiet", "-q"}) {
    if (has_flag(args, owned)) {
      TANDEM_THROW(InvalidArgument, owned,
                   " is the search's to set for each trial (the budget is min_epochs and "
                   "max_epochs, the seed is seed in [search]); drop it");
    }
  }
  // Each trial runs with --no-tensorboard (the runner's): a --tensorboard
  // passed this check and failed every trial.
  if (has_flag(args, "--tensorboard")) {
    TANDEM_THROW(InvalidArgument,
                 "--tensorboard: the trials write no TensorBoard events (each trial's "
                 "metrics.jsonl is there for tandem report OUTPUT/trial-NNN); drop it");
  }
  if (space.settings.steps_per_epoch > 0) {
    for (const char* owned : {"--steps-per-epoch", "--repeat"}) {
      if (has_flag(args, owned)) {
        TANDEM_THROW(InvalidArgument, owned,
                     " is the search's to set with budgets in steps (each trial's epochs are "
                     "min_steps steps of repeated data); drop it");
      }
    }
  }
  for (const tune::Parameter& p : space.parameters) {
    const std::string flag = p.name.starts_with("model.") ? "--model-options" : "--" + p.name;
    if (has_flag(args, flag))
      TANDEM_THROW(InvalidArgument, flag, " is given and searched (", p.name, "); drop one");
  }
  CLI::App dry{"tandem", "tandem"};
  // Held while parsing: the options it registered live in its closure.
  const Command train = add_train_command(dry);
  std::vector<std::string> reversed = {"train"};
  reversed.insert(reversed.end(), args.begin(), args.end());
  const std::vector<std::string> trial = tune::trial_arguments(first);
  reversed.insert(reversed.end(), trial.begin(), trial.end());
  std::reverse(reversed.begin(), reversed.end());
  try {
    dry.parse(reversed);
  } catch (const CLI::ParseError& e) {
    TANDEM_THROW(InvalidArgument, "a trial's tandem train flags: ", e.what());
  }
}

// The `tandem train` command that reproduces the search's best trial: its
// settings, seed and budget (the epochs it reached of a schedule over the
// maximum, in steps when the budgets are). Without the budget and seed the
// printed command trained 5 epochs of another schedule from seed 0.
std::string best_command_line(const std::vector<std::string>& train_args,
                              const tune::SearchSettings& s, const tune::SearchResult& r) {
  const tune::TrialRecord& best = r.trials[static_cast<size_t>(r.best)];
  const int64_t reached = r.rungs[static_cast<size_t>(r.best_rung)];
  std::string command = "tandem train";
  for (const std::string& a : train_args) command += " " + a;
  for (const std::string& a : tune::trial_arguments(best.settings)) command += " " + a;
  for (const std::string& a :
       tune::budget_arguments(reached, s.max_epochs, best.seed, s.steps_per_epoch))
    command += " " + a;
  return command;
}

struct Workers {
  int64_t parallel = 1;  // trials at once
  int threads = 0;       // --threads for each trial (0: the trial's own)
};

// One trial per device unless --parallel says otherwise: a one-device trial
// takes a core, a trial of a multi-device strategy its --devices (all the
// cores when unset); each device of the trials running at once gets an
// equal share of the cores (--threads) unless the flags set it.
Workers size_workers(const std::vector<std::string>& train_args, int64_t requested) {
  if (requested < 0)
    TANDEM_THROW(InvalidArgument, "--parallel must be at least 1 (0: one per device), got ",
                 requested);
  const int cores = std::max(1, cpu_info().physical_cores);
  const std::string strategy = flag_value(train_args, "--strategy");
  const bool one_device = strategy.empty() || strategy == "one-device" || strategy == "one_device";
  const std::string devices = flag_value(train_args, "--devices");  // checked by the dry parse
  const int per_trial = one_device ? 1 : devices.empty() ? cores : std::max(1, std::stoi(devices));
  Workers w;
  w.parallel = requested > 0 ? requested : std::max(1, cores / per_trial);
  // Each trial's devices share its part of the cores (a multi-device
  // trial's own default took every core for each of them: two trials of
  // one mirrored device ran 4 threads on 2 cores).
  if (!has_flag(train_args, "--threads")) {
    const int64_t devices_at_once = std::min<int64_t>(w.parallel * per_trial, cores);
    w.threads = std::max(1, cores / static_cast<int>(devices_at_once));
  }
  return w;
}

// Ctrl-C sets stop_search for the search's lifetime. No SA_RESTART:
// waitpid returns, so that the signal is passed on to the trials.
class InterruptScope {
 public:
  InterruptScope() {
    stop_search.store(false);
    struct sigaction action = {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_);
  }
  ~InterruptScope() { sigaction(SIGINT, &previous_, nullptr); }
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  struct sigaction previous_ = {};
};

std::string html_report(const tune::SearchResult& r, const tune::SearchSettings& s,
                        const std::vector<std::string>& train_args) {
  // Budgets in steps are counted in steps (an epoch is then min_steps).
  const bool in_steps = s.steps_per_epoch > 0;
  const std::string unit = in_steps ? "steps" : "epochs";
  const auto budget = [&](int64_t epochs) {
    return in_steps ? epochs * s.steps_per_epoch : epochs;
  };
  std::vector<monitor::Series> curves;
  for (size_t t = 0; t < r.trials.size(); ++t) {
    const tune::TrialRecord& trial = r.trials[t];
    if (trial.curve.empty()) continue;
    const bool best = static_cast<int64_t>(t) == r.best;
    monitor::Series series{.name = fmt::format("trial {}{}", t, best ? " (best)" : ""),
                           .color = best ? "#e15759" : "#9db4d3",
                           .markers = true};
    for (size_t e = 0; e < trial.curve.size(); ++e) {
      series.x.push_back(static_cast<double>(budget(static_cast<int64_t>(e) + 1)));
      series.y.push_back(trial.curve[e]);
    }
    curves.push_back(std::move(series));
  }
  std::string rungs;
  for (size_t k = 0; k < r.rungs.size(); ++k) {
    int64_t reached = 0;
    double best = std::numeric_limits<double>::quiet_NaN();
    for (const tune::TrialRecord& t : r.trials) {
      if (t.results.size() <= k) continue;
      ++reached;
      const double v = t.results[k];
      if (std::isnan(best) || (s.maximize ? v > best : v < best)) best = v;
    }
    rungs += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.4f}</td></tr>", k,
                         budget(r.rungs[k]), reached, best);
  }
  std::string trials;
  for (size_t t = 0; t < r.trials.size(); ++t) {
    const tune::TrialRecord& trial = r.trials[t];
    std::string results;
    for (double v : trial.results) results += fmt::format("{:.4f} ", v);
    trials += fmt::format(
        "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0f} s</td><td>{}</td></tr>",
        static_cast<int64_t>(t) == r.best ? " style=\"font-weight:bold\"" : "", t,
        monitor::html_escape(tune::describe(trial.settings)), results,
        budget(static_cast<int64_t>(trial.curve.size())), trial.seconds,
        monitor::html_escape(trial.error));
  }
  const std::string best =
      r.best >= 0 ? monitor::html_escape(best_command_line(train_args, s, r)) : std::string("none");
  return fmt::format(
      R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tandem tune search</title>
<style>body {{ font-family: sans-serif; margin: 24px; }} td, th {{ padding: 3px 12px 3px 0; text-align: left; }}
svg.chart {{ border: 1px solid #ddd; }}</style></head><body>
<h1>Hyperparameter search: {} trials, {} {}</h1>
<p>Best: trial {} &mdash; <code>{}</code>. Compute: {} {} over all trials ({:.0f}% of {} trials x {}
{}), {:.0f} s of trial time, {:.0f} s wall.</p>
<div>{}</div>
<h2>Rungs</h2><table><tr><th>rung</th><th>{}</th><th>trials</th><th>best {}</th></tr>{}</table>
<h2>Trials</h2><table><tr><th>trial</th><th>settings</th><th>{} by rung</th><th>{}</th>
<th>time</th><th>error</th></tr>{}</table></body></html>
)",
      r.trials.size(), s.scheduler == "asha" ? "ASHA" : "every trial in full", s.sampler, r.best,
      best, budget(r.epochs_trained), unit,
      100.0 * static_cast<double>(r.epochs_trained) /
          static_cast<double>(static_cast<int64_t>(r.trials.size()) * s.max_epochs),
      r.trials.size(), budget(s.max_epochs), unit, r.trial_seconds, r.wall_seconds,
      monitor::line_chart(
          {.id = "trials",
           .title = fmt::format("{} by {}, every trial", s.metric, in_steps ? "step" : "epoch"),
           .x_label = in_steps ? "step" : "epoch",
           .y_label = s.metric,
           .series = curves,
           .y_from_zero = false}),
      unit, s.metric, rungs, s.metric, unit, trials);
}

int run_tune_search(SearchCommandOptions& o) {
  if (o.output.empty())
    TANDEM_THROW(InvalidArgument, "--output (the search's directory) is required");
  const std::string text = read_text_file(o.space, "space file", kMaxSpaceBytes);
  const tune::SearchSpace space = tune::parse_search_space(text, o.space);
  const std::vector<tune::TrialSettings> trials = tune::sample_trials(space);
  check_train_args(o.train_args, space, trials.front());
  const Workers workers = size_workers(o.train_args, o.parallel);
  const tune::SearchSettings& s = space.settings;
  // Under mpirun: rank 0 searches, every rank runs trials (mpi_trial_runner.h).
  const bool across_ranks = comm::launched_by_mpi() && comm::launched_process_count() > 1;
  const int rank = across_ranks ? comm::mpi_world_rank() : 0;
  const std::string where =
      across_ranks ? fmt::format("rank {} on host {}", rank, host_name()) : std::string();
  ProcessTrialRunner local(o.train_args, s.metric, workers.threads, &stop_search, where);
  if (rank != 0) {
    const InterruptScope interrupts;
    serve_trials(local, workers.parallel, stop_search);
    return 0;
  }
  std::optional<MpiTrialRunner> ranks;
  if (across_ranks) ranks.emplace(local, workers.parallel, &stop_search);
  tune::TrialRunner& runner = ranks ? static_cast<tune::TrialRunner&>(*ranks) : local;
  const int64_t parallel = ranks ? ranks->slots() : workers.parallel;
  fmt::print("tandem tune search: {} {} trials ({}), {} to {}, {} at a time{}; {} in {}\n",
             trials.size(), s.sampler,
             s.scheduler == "asha" ? fmt::format("ASHA, eta {}", s.reduction_factor)
                                   : std::string("each in full"),
             tune::budget_point(s.steps_per_epoch, s.min_epochs),
             tune::budget_point(s.steps_per_epoch, s.max_epochs), parallel,
             ranks ? fmt::format(" over {} ranks", comm::launched_process_count()) : std::string(),
             s.metric, o.output);
  tune::SearchResult r;
  {
    const InterruptScope interrupts;
    r = tune::run_search({.space = space,
                          .space_text = text,
                          .trial_arguments = o.train_args,
                          .output_dir = o.output,
                          .parallel = parallel,
                          .resume = o.resume,
                          .stop = &stop_search,
                          .log =
                              [](const std::string& line) {
                                fmt::print("  {}\n", line);
                                std::fflush(stdout);
                              }},
                         runner);
  }
  if (!o.report.empty()) {
    const std::string html = html_report(r, s, o.train_args);
    const std::string_view parts[] = {html};
    write_file_atomically(o.report, parts, "report");
  }
  if (r.interrupted) {
    fmt::print("stopped; continue with the same command and --resume\n");
    return 130;
  }
  const double full = static_cast<double>(static_cast<int64_t>(trials.size()) * s.max_epochs);
  fmt::print(
      "{} trained over {} trials ({:.0f}% of training every trial to {}), "
      "{:.0f} s\n",
      amount(s, r.epochs_trained), trials.size(),
      100.0 * static_cast<double>(r.epochs_trained) / full,
      tune::budget_point(s.steps_per_epoch, s.max_epochs), r.wall_seconds);
  if (r.best < 0) {
    fmt::print(stderr,
               "tandem: error: no trial has a usable result (each failed or diverged; their logs "
               "are in {}/trial-*)\n",
               o.output);
    return 1;
  }
  const tune::TrialRecord& best = r.trials[static_cast<size_t>(r.best)];
  const double best_value = best.results[static_cast<size_t>(r.best_rung)];
  fmt::print("best: trial {} ({}), {} {:.4f} at {}\n  {}\n", r.best, tune::describe(best.settings),
             s.metric, best_value,
             tune::budget_point(s.steps_per_epoch, r.rungs[static_cast<size_t>(r.best_rung)]),
             best_command_line(o.train_args, s, r));
  // ASHA promotes the top 1/reduction_factor of a rung's trials: with
  // fewer trials than that at a rung, none goes on, and the maximum budget
  // was never trained.
  int64_t highest = 0;
  for (const tune::TrialRecord& t : r.trials)
    highest = std::max(highest, static_cast<int64_t>(t.results.size()) - 1);
  const int64_t reached = r.rungs[static_cast<size_t>(highest)];
  if (highest + 1 < static_cast<int64_t>(r.rungs.size())) {
    fmt::print(stderr,
               "tandem: no trial trained past {}: a rung promotes its best 1/{} of trials, too "
               "few for one here (raise trials, or lower reduction_factor)\n",
               tune::budget_point(s.steps_per_epoch, reached), s.reduction_factor);
  }
  if (s.target && !r.target_reached) {
    fmt::print(stderr,
               "tandem: the target {} {} was not reached by {} (best {:.4f}); widen the space or "
               "raise the maximum budget\n",
               s.metric, *s.target, tune::budget_point(s.steps_per_epoch, reached), best_value);
    return 1;
  }
  return 0;
}

}  // namespace

Command add_tune_search_command(CLI::App& tune) {
  CLI::App* search = tune.add_subcommand(
      "search",
      "Search hyperparameters with asynchronous successive halving; every other flag is a "
      "tandem train flag for all trials (docs/tuning.md)");
  auto o = std::make_shared<SearchCommandOptions>();
  search->add_option("--space", o->space, "The search space and settings (TOML)")->required();
  search->add_option("--output,-o", o->output, "The search's directory: a run directory per trial")
      ->required();
  search->add_option("--parallel", o->parallel,
                     "Trials at once (default: one per device, a device per core)");
  search->add_flag("--resume", o->resume, "Continue the search in --output");
  search->add_option("--report", o->report,
                     "Write an HTML page with every trial's curve, the rungs and the best");
  search->allow_extras();
  return {search, [o, search]() {
            o->train_args = search->remaining();
            return run_tune_search(*o);
          }};
}

}  // namespace tandem::cli
