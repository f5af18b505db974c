#include "tandem/cli/process_trial_runner.h"

#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "tandem/base/error.h"
#include "tandem/base/text_file.h"
#include "tandem/cli/child_process.h"
#include "tandem/train/run_directory.h"
#include "tandem/train/trainer.h"

extern char** environ;

namespace tandem::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A trial's summary is a few sections and a line per epoch.
constexpr std::uintmax_t kMaxSummaryBytes = std::uintmax_t{256} << 20;

// The last line of a trial's log that says what went wrong.
std::string error_in_log(const std::string& path) {
  std::ifstream in(path);
  std::string line, error, last;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    last = line;
    if (line.find("error") != std::string::npos) error = line;
  }
  return error.empty() ? last : error;
}

// The search's metric after each epoch, from the trial's summary.json.
std::vector<double> read_curve(const std::string& dir, const std::string& metric) {
  const std::string path = train::RunDirectory(dir).summary();
  if (!fs::exists(path)) return {};
  nlohmann::json summary;
  try {
    summary = nlohmann::json::parse(read_text_file(path, "trial summary", kMaxSummaryBytes));
  } catch (const nlohmann::json::exception& e) {
    TANDEM_THROW(IoError, "'", path, "' is not JSON: ", e.what());
  }
  std::vector<double> curve;
  for (const nlohmann::json& epoch : summary.value("history", nlohmann::json::array())) {
    if (!epoch.contains(metric)) {
      std::string keys;
      for (const auto& [key, value] : epoch.items())
        if (key.starts_with("train_") || key.starts_with("validation_"))
          keys += (keys.empty() ? "" : ", ") + key;
      TANDEM_THROW(InvalidArgument, "the trial's history has no '", metric, "' (it has ", keys,
                   ")");
    }
    const nlohmann::json& v = epoch[metric];
    curve.push_back(v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN());
  }
  return curve;
}

}  // namespace

ProcessTrialRunner::ProcessTrialRunner(std::vector<std::string> train_args, std::string metric,
                                       int threads, const std::atomic<bool>* interrupt,
                                       std::string where)
    : executable_(fs::read_symlink("/proc/self/exe").string()),
      train_args_(std::move(train_args)),
      metric_(std::move(metric)),
      threads_(threads),
      interrupt_(interrupt),
      where_(std::move(where)) {}

void ProcessTrialRunner::start(const tune::TrialJob& job) {
  std::error_code error;
  fs::create_directories(job.dir, error);
  if (error) TANDEM_THROW(IoError, "cannot create '", job.dir, "': ", error.message());
  // A job whose rung was trained before an interruption left no trace in
  // the search's state: its summary says so.
  try {
    std::vector<double> curve = read_curve(job.dir, metric_);
    if (static_cast<int64_t>(curve.size()) >= job.epochs) {
      ready_.push_back(
          {job, {.status = tune::TrialOutcome::Status::finished, .curve = std::move(curve)}});
      return;
    }
  } catch (const Error&) {
    // Trained again below; the run's own error, if any, comes from there.
  }
  const bool resuming = fs::exists(train::RunDirectory(job.dir).checkpoint());
  std::vector<std::string> args = {executable_, "train"};
  for (size_t i = 0; i < train_args_.size(); ++i) {
    // A promoted trial resumes its own checkpoint: the weights it started
    // from (--init-from) served its first rung, and train refuses both.
    const std::string& a = train_args_[i];
    if (resuming && (a == "--init-from" || a.starts_with("--init-from=") || a == "--non-strict")) {
      if (a == "--init-from") ++i;  // and its value
      continue;
    }
    args.push_back(a);
  }
  const std::vector<std::string> trial = tune::trial_arguments(job.settings);
  args.insert(args.end(), trial.begin(), trial.end());
  const std::vector<std::string> budget =
      tune::budget_arguments(job.epochs, job.max_epochs, job.seed, job.steps_per_epoch);
  args.insert(args.end(), budget.begin(), budget.end());
  for (const std::string& a :
       {std::string("--output"), job.dir, std::string("--quiet"), std::string("--no-tensorboard")})
    args.push_back(a);
  if (threads_ > 0) {
    args.push_back("--threads");
    args.push_back(std::to_string(threads_));
  }
  if (resuming) args.push_back("--resume");
  const std::string log = (fs::path(job.dir) / "log.txt").string();
  {
    std::ofstream out(log, std::ios::app);
    if (!where_.empty()) out << "# " << where_ << '\n';
    out << "$";
    for (const std::string& a : args) out << ' ' << a;
    out << '\n';
  }
  // A trial is a process of its own, not a rank of the search's MPI job:
  // without the launcher's variables it does not take itself for one.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v(*e);
    if (!v.starts_with("OMPI_") && !v.starts_with("PMIX_") && !v.starts_with("PMI_"))
      env.emplace_back(v);
  }
  const pid_t pid = start_child("a trial", args, env, {.output_file = log});
  running_[pid] = {job, Clock::now(), log};
}

std::pair<tune::TrialJob, tune::TrialOutcome> ProcessTrialRunner::wait() {
  for (;;)
    if (auto done = reap(/*block=*/true)) return std::move(*done);
}

std::optional<std::pair<tune::TrialJob, tune::TrialOutcome>> ProcessTrialRunner::poll() {
  return reap(/*block=*/false);
}

void ProcessTrialRunner::forward_interrupt() {
  if (interrupt_ == nullptr || !interrupt_->load() || forwarded_) return;
  forwarded_ = true;
  for (const auto& [pid, running] : running_) ::kill(pid, SIGINT);
}

std::optional<std::pair<tune::TrialJob, tune::TrialOutcome>> ProcessTrialRunner::reap(bool block) {
  if (!ready_.empty()) {
    auto next = std::move(ready_.front());
    ready_.pop_front();
    return next;
  }
  forward_interrupt();  // a signal that came before this wait
  if (running_.empty()) {
    if (block) TANDEM_THROW(Error, "waiting for a trial when none runs");
    return std::nullopt;
  }
  int status = 0;
  const pid_t pid = ::waitpid(-1, &status, block ? 0 : WNOHANG);
  if (pid == 0 || (pid < 0 && errno == EINTR)) return std::nullopt;
  if (pid < 0) TANDEM_THROW(Error, "waiting for a trial: ", std::strerror(errno));
  const auto it = running_.find(pid);
  if (it == running_.end()) return std::nullopt;
  const Running done = it->second;
  running_.erase(it);
  tune::TrialOutcome outcome;
  outcome.seconds = std::chrono::duration<double>(Clock::now() - done.start).count();
  const bool interrupted = (WIFEXITED(status) && WEXITSTATUS(status) == 130) ||
                           (WIFSIGNALED(status) && WTERMSIG(status) == SIGINT);
  try {
    outcome.curve = read_curve(done.job.dir, metric_);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    outcome.status = code == 0     ? tune::TrialOutcome::Status::finished
                     : code == 3   ? tune::TrialOutcome::Status::diverged
                     : interrupted ? tune::TrialOutcome::Status::interrupted
                                   : tune::TrialOutcome::Status::failed;
    if (code != 0 && !interrupted) {
      outcome.error = WIFSIGNALED(status) ? fmt::format("killed by signal {}", WTERMSIG(status))
                                          : error_in_log(done.log);
    }
  } catch (const Error& e) {
    outcome.status = tune::TrialOutcome::Status::failed;
    outcome.error = e.what();
  }
  return std::pair(done.job, outcome);
}

}  // namespace tandem::cli
