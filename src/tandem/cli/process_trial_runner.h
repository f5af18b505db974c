#pragma once
// The trials of `tandem tune search` as `tandem train` processes on this
// host (tune/search.h's TrialRunner): each job runs in its trial's run
// directory, its output appended to log.txt there.

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>

#include "tandem/tune/search.h"

namespace tandem::cli {

class ProcessTrialRunner : public tune::TrialRunner {
 public:
  // train_args: the flags every trial gets; metric: the summary's history
  // figure the search ranks by; threads: --threads for each trial (0: the
  // trial's own); once `interrupt` is set, the running trials get SIGINT
  // (each then saves its checkpoint); `where` ("rank 1 on host h") goes
  // into each log's command line when not empty.
  ProcessTrialRunner(std::vector<std::string> train_args, std::string metric, int threads,
                     const std::atomic<bool>* interrupt, std::string where = {});

  void start(const tune::TrialJob& job) override;
  std::pair<tune::TrialJob, tune::TrialOutcome> wait() override;
  // A job that has ended, without waiting for one.
  std::optional<std::pair<tune::TrialJob, tune::TrialOutcome>> poll();
  // Jobs started and not yet returned by wait() or poll().
  int64_t running() const { return static_cast<int64_t>(running_.size() + ready_.size()); }

 private:
  struct Running {
    tune::TrialJob job;
    std::chrono::steady_clock::time_point start;
    std::string log;
  };
  std::optional<std::pair<tune::TrialJob, tune::TrialOutcome>> reap(bool block);
  // A trial signalled on its own (not through the terminal) passes SIGINT
  // on, so that each running trial saves its checkpoint.
  void forward_interrupt();

  std::string executable_;
  std::vector<std::string> train_args_;
  std::string metric_;
  int threads_;
  const std::atomic<bool>* interrupt_;
  std::string where_;
  std::map<pid_t, Running> running_;
  std::deque<std::pair<tune::TrialJob, tune::TrialOutcome>> ready_;
  bool forwarded_ = false;
};

}  // namespace tandem::cli
