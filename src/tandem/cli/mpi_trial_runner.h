#pragma once
// The trials of `tandem tune search` over the ranks of an MPI job
// (`mpirun -np H tandem tune search ...`, one rank per host): rank 0 runs
// the search (tune/search.h) with an MpiTrialRunner, which starts each job
// on a rank with a free slot, its own included; every other rank serves
// jobs (serve_trials), each as a `tandem train` process on its host. The
// search's output directory must be one that every rank sees at the same
// path (one host, or a shared filesystem): a promoted trial resumes from
// its checkpoint on whichever rank is free. Jobs and results travel as
// small MPI messages (comm::mpi_send_message).

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "tandem/cli/process_trial_runner.h"

namespace tandem::cli {

class MpiTrialRunner : public tune::TrialRunner {
 public:
  // Waits (at most a minute) for every other rank to say how many trials
  // it runs at once; `local_slots` are this rank's. Once `interrupt` is
  // set, every rank's running trials get SIGINT.
  MpiTrialRunner(ProcessTrialRunner& local, int64_t local_slots,
                 const std::atomic<bool>* interrupt);
  // Tells every other rank to stop (interrupting what it still runs).
  ~MpiTrialRunner() override;
  MpiTrialRunner(const MpiTrialRunner&) = delete;
  MpiTrialRunner& operator=(const MpiTrialRunner&) = delete;

  // Trials at once over every rank.
  int64_t slots() const;
  void start(const tune::TrialJob& job) override;
  std::pair<tune::TrialJob, tune::TrialOutcome> wait() override;

 private:
  ProcessTrialRunner& local_;
  const std::atomic<bool>* interrupt_;
  bool interrupted_ = false;
  std::vector<int64_t> slots_;    // per rank
  std::vector<int64_t> running_;  // per rank
};

// A rank other than 0: says how many trials it runs at once (`slots`),
// then runs the jobs rank 0 sends on `local` and sends back how each
// ended, until rank 0 says stop.
void serve_trials(ProcessTrialRunner& local, int64_t slots, std::atomic<bool>& interrupt);

}  // namespace tandem::cli
