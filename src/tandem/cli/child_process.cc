#include "tandem/cli/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tandem/base/error.h"

namespace tandem::cli {
namespace {

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (const std::string& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

// What the child reports when it could not exec: which step failed, and its errno.
struct ChildFailure {
  enum Step : int { output_file, exec } step = exec;
  int error = 0;
};

// In the child, before exec: async-signal-safe calls only. Returns only on
// a failure.
ChildFailure exec_child(pid_t parent, char* const* argv, char* const* envp,
                        const ChildOptions& options) {
  if (options.own_process_group) ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(127);  // the parent ended already
  if (!options.output_file.empty()) {
    const int fd = ::open(options.output_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0 || ::dup2(fd, STDOUT_FILENO) < 0 || ::dup2(fd, STDERR_FILENO) < 0)
      return {ChildFailure::output_file, errno};
    ::close(fd);
  }
  ::execvpe(argv[0], argv, envp);
  return {ChildFailure::exec, errno};
}

}  // namespace

pid_t start_child(const std::string& what, const std::vector<std::string>& command,
                  const std::vector<std::string>& environment, const ChildOptions& options) {
  if (command.empty()) TANDEM_THROW(InvalidArgument, "cannot start ", what, ": no command");
  const std::vector<char*> argv = c_strings(command);
  const std::vector<char*> envp = c_strings(environment);
  // fork and exec rather than posix_spawn, for the parent-death signal.
  // exec's failure comes back through a pipe that a successful exec closes.
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0)
    TANDEM_THROW(IoError, "cannot start ", what, ": ", std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    ::close(report[0]);
    ::close(report[1]);
    TANDEM_THROW(IoError, "cannot start ", what, ": ", std::strerror(error));
  }
  if (pid == 0) {
    ::close(report[0]);
    const ChildFailure failure = exec_child(parent, argv.data(), envp.data(), options);
    [[maybe_unused]] const ssize_t written = ::write(report[1], &failure, sizeof failure);
    ::_exit(127);
  }
  ::close(report[1]);
  if (options.own_process_group) ::setpgid(pid, pid);  // as the child does: whichever runs first
  ChildFailure failure;
  ssize_t got = 0;
  do {
    got = ::read(report[0], &failure, sizeof failure);
  } while (got < 0 && errno == EINTR);
  ::close(report[0]);
  if (got == static_cast<ssize_t>(sizeof failure)) {
    ::waitpid(pid, nullptr, 0);
    if (failure.step == ChildFailure::output_file)
      TANDEM_THROW(IoError, "cannot start ", what, ": cannot open '", options.output_file,
                   "': ", std::strerror(failure.error));
    TANDEM_THROW(IoError, "cannot start ", what, " as '", command.front(),
                 "': ", std::strerror(failure.error));
  }
  return pid;
}

}  // namespace tandem::cli
