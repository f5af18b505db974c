#pragma once
// Private: the Trainer's state between its translation units (trainer.cc:
// set-up and the loop; trainer_input.cc: the training input and each
// step's agreement; trainer_checkpoint.cc: saving and resuming;
// trainer_elastic.cc: elastic membership).

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "tandem/comm/elastic_group.h"
#include "tandem/data/dataset.h"
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
  // Consecutive steps that applied no update (a resumed run goes on
  // counting: restarting at 0 granted 32 more skipped steps each resume).
  int64_t steps_without_update = 0;
  // The gradient noise scale over this fit (restarts with each fit(),
  // carried across epochs and through checkpoints).
  NoiseScaleEstimator noise_scale;
  std::vector<MetricSums> metrics;
  double train_seconds = 0.0;
  double learning_rate = 0.0;          // of the last step
  std::vector<double> replica_losses;  // per local replica, not yet summed over replicas
  std::vector<int64_t> staleness, dropped_examples;  // asynchronous engines' counts
};

// How run_epoch() ended: the epoch is over (the next one starts), the run
// was asked to stop, the data ran out (steps_per_epoch), or joiners wait to
// be taken into an elastic job.
enum class Trainer::EpochEnd : uint8_t { done, stop, input_exhausted, joiners };

// An elastic job's membership and the state it rolls back to.
struct Trainer::ElasticState {
  std::unique_ptr<comm::ElasticGroup> group;
  // A joiner takes the members' state in its first fit().
  bool awaiting_state = false;
  // The last in-memory copy: the engine's state with the Trainer's
  // position, sums and history in its metadata.
  std::optional<distribute::EngineState> copy;
  std::chrono::steady_clock::time_point last_step_end;
};

// The training input of a fit: the batches of this process, the current
// pass over them, and the empty batch a process whose shard ended trains on.
struct Trainer::Input {
  data::Dataset batches = data::Dataset::range(0);
  data::Iterator iterator;
  int64_t pass = 0;  // the pass `iterator` reads
  std::optional<data::Element> empty_batch;
  // With TrainConfig::repeat, once every process's pass has ended (the
  // Trainer agrees on it: a process that started its own ahead of the
  // others mixed two passes in one global batch).
  void start_next_pass() { iterator = batches.iterator(++pass); }
};

// What a step gets from the input, once every process agreed on it.
struct Trainer::StepInput {
  enum class Status : uint8_t { step, end_of_data, stop, joiners } status = Status::step;
  data::Element batch;
  int64_t global_rows = 0;
  std::chrono::steady_clock::time_point start, input_done;
};

// A checkpoint read and checked for the next fit(), and its position.
struct Trainer::PendingResume {
  Checkpoint checkpoint;
  Progress progress;
  std::vector<EpochResult> history;
  ResumePoint point;
};

namespace detail {

// The strategy's processes, and this one's index among them.
inline int processes_of(const distribute::Strategy& s) {
  return s.global_replicas() / s.local_replicas();
}
inline int process_index_of(const distribute::Strategy& s) {
  return s.first_replica() / s.local_replicas();
}

// Folds the replicas' partial sums (per local replica: the loss sum and
// each metric's sums, zeroed here) into the run's totals, over every
// replica of every process (collective).
void fold_partial_sums(distribute::Strategy& strategy, std::vector<double>& replica_losses,
                       std::vector<std::vector<MetricSums>>& metric_sums, double& loss_sum,
                       std::vector<MetricSums>& metrics);

}  // namespace detail
}  // namespace tandem::train
