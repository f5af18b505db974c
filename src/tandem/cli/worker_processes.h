#pragma once
// The worker processes `tandem launch` starts on this host: each in a
// process group of its own (so a terminal's Ctrl-C reaches the launcher
// once, and the launcher forwards it), watched for its exit, and sent
// SIGTERM by the kernel should the launcher die (PR_SET_PDEATHSIG).

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tandem::cli {

struct WorkerExit {
  int rank = 0;
  int pid = 0;
  int status = 0;           // the exit status, or 128 + the signal that ended it
  std::string description;  // "exited with status 1", "was killed by signal 9 (Killed)"
};

class WorkerProcesses {
 public:
  WorkerProcesses() = default;
  ~WorkerProcesses();  // kills the workers still running
  WorkerProcesses(const WorkerProcesses&) = delete;
  WorkerProcesses& operator=(const WorkerProcesses&) = delete;

  // Starts `command` (looked up on PATH) as worker `rank` with this
  // process's environment plus `environment` (NAME=VALUE each). Throws
  // IoError naming the command when it cannot be started.
  void start(int rank, const std::vector<std::string>& command,
             const std::vector<std::string>& environment);
  // The next worker that has ended, without waiting; nothing when none has.
  std::optional<WorkerExit> poll();
  int running() const { return static_cast<int>(workers_.size()); }
  // The ranks of the workers still running.
  std::vector<int> running_ranks() const;
  // Sends `signal` to every running worker.
  void signal_all(int signal);
  // SIGTERM (and SIGCONT, for stopped ones) to every running worker,
  // SIGKILL to those still running after `grace`; waits for all of them.
  void stop_all(std::chrono::milliseconds grace);

 private:
  std::vector<std::pair<int, int>> workers_;  // (pid, rank) of the running ones
};

}  // namespace tandem::cli
