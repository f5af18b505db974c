#include "tandem/cli/worker_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "tandem/base/error.h"

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
  std::vector<char*> argv;
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!overridden(*e, environment)) envp.push_back(*e);
  }
  for (const std::string& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // fork and exec rather than posix_spawn, for the parent-death signal: a
  // launcher killed outright (an OOM kill, kill -9) could not end its
  // workers, which trained on unsupervised. The child makes only
  // async-signal-safe calls before exec; exec's failure comes back through
  // a pipe that a successful exec closes.
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0)
    TANDEM_THROW(IoError, "cannot start worker ", rank, ": ", std::strerror(errno));
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    ::close(report[0]);
    ::close(report[1]);
    TANDEM_THROW(IoError, "cannot start worker ", rank, ": ", std::strerror(error));
  }
  if (pid == 0) {
    ::close(report[0]);
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != launcher) ::_exit(127);  // the launcher ended already
    ::execvpe(argv[0], argv.data(), envp.data());
    const int error = errno;
    [[maybe_unused]] const ssize_t written = ::write(report[1], &error, sizeof error);
    ::_exit(127);
  }
  ::close(report[1]);
  ::setpgid(pid, pid);  // as the child does: whichever runs first
  int error = 0;
  ssize_t got = 0;
  do {
    got = ::read(report[0], &error, sizeof error);
  } while (got < 0 && errno == EINTR);
  ::close(report[0]);
  if (got == static_cast<ssize_t>(sizeof error)) {
    ::waitpid(pid, nullptr, 0);
    TANDEM_THROW(IoError, "cannot start worker ", rank, " as '", command.front(),
                 "': ", std::strerror(error));
  }
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
