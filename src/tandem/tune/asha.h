#pragma once
// Asynchronous successive halving (ASHA; Li et al., "A System for Massively
// Parallel Hyperparameter Tuning", 2020): trials train in rungs of growing
// budget (min_epochs x eta^k, the last rung max_epochs), and whenever a
// worker is free the scheduler promotes a trial that is in the top 1/eta of
// the results so far at its rung (the highest such rung first), or else
// starts the next trial at the first rung. No rung waits for all of its
// trials, so no worker idles on a straggler; a promoted trial continues
// from its checkpoint, so each epoch is trained once.
//
// Pure bookkeeping: the search (tune/search.h) runs the jobs it hands out
// and reports their results back.

#include <cstdint>
#include <optional>
#include <vector>

namespace tandem::tune {

struct AshaOptions {
  int64_t trials = 0;
  int64_t min_epochs = 1;
  int64_t max_epochs = 9;
  int64_t reduction_factor = 3;
  bool maximize = true;
  // false: one rung of max_epochs (every trial trained in full; the grid
  // or random search that ASHA is measured against).
  bool successive_halving = true;
};

// The epochs each rung trains up to: min x eta^k below max, then max.
std::vector<int64_t> rung_epochs(const AshaOptions& options);

class AshaScheduler {
 public:
  struct Job {
    int64_t trial = 0;
    int64_t rung = 0;
    int64_t epochs = 0;  // train up to this epoch
  };

  // Where a trial stands: its results by rung and the highest rung
  // started (-1: not started). What a resumed search restores.
  struct TrialState {
    std::vector<double> results;  // by rung; NaN: diverged or failed (the worst)
    int64_t started_rung = -1;
    bool failed = false;
  };

  explicit AshaScheduler(const AshaOptions& options);

  // The next job to run, or nullopt when none can start now (every trial
  // started and nothing promotable: wait for a running job, or done()).
  // A job started before an interruption and never reported comes first.
  std::optional<Job> next();
  // A job's result: the metric at the end of its rung (NaN: unusable).
  void report(const Job& job, double metric);
  // The job failed: its trial is never promoted.
  void report_failure(const Job& job);
  // No job is running and none can start.
  bool done() const;

  const std::vector<int64_t>& rungs() const { return rungs_; }
  const std::vector<TrialState>& trials() const { return trials_; }
  // Restores a trial's state (a resumed search), before the first next().
  void restore(int64_t trial, TrialState state);
  // The best trial and the rung of its result: the best finite result at
  // the highest rung that has one (a trial that diverged there, NaN, is not
  // the best); {-1, -1} when no result is finite.
  struct Best {
    int64_t trial = -1;
    int64_t rung = -1;
  };
  Best best() const;

 private:
  bool better(double a, double b) const;
  // The job next() would hand out, without handing it out.
  std::optional<Job> peek() const;

  AshaOptions options_;
  std::vector<int64_t> rungs_;
  std::vector<TrialState> trials_;
  std::vector<bool> running_;  // by trial
};

}  // namespace tandem::tune
