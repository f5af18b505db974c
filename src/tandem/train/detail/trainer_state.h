#pragma once
// Private: the Trainer's state between its translation units (trainer.cc:
// set-up, input and the loop; trainer_checkpoint.cc: saving and resuming).

#include <cstdint>
#include <vector>

#include "tandem/train/checkpoint.h"
#include "tandem/train/trainer.h"

namespace tandem::train {

// Where the run stands: the next step to run and the sums of the epoch so
// far that are already over every replica (the replicas' own partial sums
// since then are in Trainer::metric_sums_ and in Progress::replica_losses).
struct Trainer::Progress {
  int64_t epoch = 0;        // 0-based epoch in progress
  int64_t step = 0;         // next step inside it
  int64_t global_step = 0;  // steps taken over the run
  double loss_sum = 0.0;    // sum of per-example losses over finite steps
  int64_t examples = 0;     // examples of finite steps
  int64_t nonfinite_steps = 0;
  std::vector<MetricSums> metrics;
  double train_seconds = 0.0;
  double learning_rate = 0.0;          // of the last step
  std::vector<double> replica_losses;  // per local replica, not yet summed over replicas
  std::vector<int64_t> staleness, dropped_examples;  // asynchronous engines' counts
};

// A checkpoint read and checked for the next fit(), and its position.
struct Trainer::PendingResume {
  Checkpoint checkpoint;
  Progress progress;
  std::vector<EpochResult> history;
  ResumePoint point;
};

namespace detail {

// Folds the replicas' partial sums (per local replica: the loss sum and
// each metric's sums, zeroed here) into the run's totals, over every
// replica of every process (collective).
void fold_partial_sums(distribute::Strategy& strategy, std::vector<double>& replica_losses,
                       std::vector<std::vector<MetricSums>>& metric_sums, double& loss_sum,
                       std::vector<MetricSums>& metrics);

}  // namespace detail
}  // namespace tandem::train
