#include "tandem/cli/worker_processes.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "tandem/cli/child_process.h"

extern char** environ;

namespace tandem::cli {
namespace {

std::string describe_status(int status, int& code) {
  if (WIFEXITED(status)) {
    code = WEXITSTATUS(status);
    return "exited with status " + std::to_string(code);
  }
  if (WIFSIGNALED(status)) {
    code = 128 + WTERMSIG(status);
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           ::strsignal(WTERMSIG(status)) + ")";
  }
  code = 1;
  return "ended with wait status " + std::to_string(status);
}

// Whether `entry` (NAME=VALUE) sets one of the names in `overrides`.
bool overridden(const char* entry, const std::vector<std::string>& overrides) {
  for (const std::string& o : overrides) {
    const size_t name = o.find('=');
    if (std::strncmp(entry, o.data(), name + 1) == 0) return true;
  }
  return false;
}

}  // namespace

WorkerProcesses::~WorkerProcesses() {
  for (const auto& [pid, rank] : workers_) ::kill(pid, SIGKILL);
  for (const auto& [pid, rank] : workers_) ::waitpid(pid, nullptr, 0);
}

void WorkerProcesses::start(int rank, const std::vector<std::string>& command,
                            const std::vector<std::string>& environment) {
  std::vector<std::string> full;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!overridden(*e, environment)) full.emplace_back(*e);
  }
  full.insert(full.end(), environment.begin(), environment.end());
  const pid_t pid =
      start_child("worker " + std::to_string(rank), command, full, {.own_process_group = true});
  workers_.emplace_back(pid, rank);
}

std::optional<WorkerExit> WorkerProcesses::poll() {
  for (size_t i = 0; i < workers_.size(); ++i) {
    const auto [pid, rank] = workers_[i];
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) != pid) continue;
    workers_.erase(workers_.begin() + static_cast<std::ptrdiff_t>(i));
    WorkerExit exit{.rank = rank, .pid = pid};
    exit.description = describe_status(status, exit.status);
    return exit;
  }
  return std::nullopt;
}

std::vector<int> WorkerProcesses::running_ranks() const {
  std::vector<int> ranks;
  for (const auto& [pid, rank] : workers_) ranks.push_back(rank);
  return ranks;
}

void WorkerProcesses::signal_all(int signal) {
  for (const auto& [pid, rank] : workers_) ::kill(pid, signal);
}

void WorkerProcesses::stop_all(std::chrono::milliseconds grace) {
  signal_all(SIGTERM);
  signal_all(SIGCONT);  // a stopped worker would hold SIGTERM until the SIGKILL
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (!workers_.empty() && std::chrono::steady_clock::now() < deadline) {
    if (!poll()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  signal_all(SIGKILL);
  for (const auto& [pid, rank] : workers_) ::waitpid(pid, nullptr, 0);
  workers_.clear();
}

}  // namespace tandem::cli
