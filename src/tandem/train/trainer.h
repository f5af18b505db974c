#pragma once
// Trainer: fit() and evaluate() for classification on in-memory labelled
// images, on one device or replicated by a distribution strategy. Each epoch
// visits the training set in an order drawn from (seed, epoch); each global
// batch is split between the replicas as evenly as possible (nothing is
// dropped unless drop_remainder) and every replica normalises its loss by the
// global batch's example count, so that the replicas' all-reduced gradients
// are the one-device gradient of the whole batch. Dropout masks come from
// (seed, step, replica); the learning rate is a function of the step.
// Together with checkpoints that record the position inside an epoch and the
// running sums, a resumed run produces the same losses as an uninterrupted
// one. Checkpoints hold one replica's state (they are identical), written by
// the chief, and load into any number of replicas.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/data/fashion_mnist.h"
#include "tandem/data/stats.h"
#include "tandem/distribute/strategy.h"
#include "tandem/nn/module.h"
#include "tandem/optim/lr_schedule.h"
#include "tandem/optim/optimizer.h"
#include "tandem/precision/loss_scaler.h"
#include "tandem/precision/policy.h"

namespace tandem::train {

struct TrainConfig {
  std::string model = "cnn";  // recorded in checkpoints and summaries
  int64_t epochs = 5;
  int64_t batch_size = 128;
  int64_t eval_batch_size = 1000;
  bool drop_remainder = false;  // false: the last partial batch is trained too
  optim::OptimizerConfig optimizer;
  // Cosine decay from the learning rate to min_lr over the run: the recipe
  // fixes the rate, not its schedule, and decay converges further (see
  // docs/performance.md for both).
  std::string schedule = "cosine";  // constant, step, cosine
  double lr_step_epochs = 1.0;      // step schedule period, in epochs
  double lr_gamma = 0.1;            // step schedule factor
  double min_lr = 0.0;              // cosine floor
  double warmup_epochs = 0.0;
  uint64_t seed = 0;
  // The matmul/conv dtype the factory's models compute in: recorded in
  // checkpoints (with the policy) so that `tandem evaluate` rebuilds the
  // model the same way; set it with the policy (precision::matrix_dtype).
  DType compute_dtype = DType::f32;
  distribute::StrategyConfig strategy;  // one_device by default
  distribute::ReducerOptions reducer;
  // Mixed precision: the policy the models were built with (the factory's
  // job) and the loss scaling. Unset loss_scale: dynamic for mixed_float16,
  // none otherwise. With a scaler, steps with non-finite gradients are
  // skipped instead of failing.
  precision::Policy policy = precision::global_policy();
  std::optional<precision::LossScalerOptions> loss_scale;
  // Applied to each batch this process assembles, before the batch is split
  // between its replicas (augmentation, decoding): part of the step's input
  // time. Must keep the number of rows. thread_generator() is seeded from
  // (seed, step) before each call, so random augmentation is reproducible.
  // Runs on the main thread, or (prefetch or parallel input) on the data
  // layer's threads while replicas compute: it must not touch the model,
  // and with input_parallel_calls != 1 it runs on several batches at once
  // (a data::Dataset it iterates there runs its parallel maps sequentially).
  std::function<void(Tensor& images, Tensor& labels)> batch_transform;
  // Batches assembled ahead of the step that trains on them, on a background
  // thread (tf.data's prefetch): hides a slow batch_transform behind the
  // replicas' compute. 0: each batch is assembled when its step starts;
  // data::kAutotune: the buffer grows while the step finds it empty.
  int prefetch_batches = 0;
  // Batches assembled at once on the data layer's pool (tf.data's
  // num_parallel_calls for the batch-building map): for a batch_transform
  // slower than a step even when hidden by prefetch. At most the pool's
  // size (a thread per logical CPU, at least 2) run at once.
  // data::kAutotune: grown while the step waits for input. With prefetch_batches or this set, the
  // input runs as a data pipeline whose per-stage counters are in
  // EpochResult::input_stages. Batches depend only on (epoch, step), so
  // neither setting changes results.
  int input_parallel_calls = 1;
  // Where checkpoints go (empty: no checkpoints). "checkpoint.tckpt" inside it.
  std::string output_dir;
  bool resume = false;
};

struct EpochResult {
  int64_t epoch = 0;  // 1-based
  double train_loss = 0.0;
  double train_accuracy = 0.0;
  double test_loss = 0.0;
  double test_accuracy = 0.0;
  double examples_per_second = 0.0;  // training examples over training time
  double train_seconds = 0.0;
  double learning_rate = 0.0;  // at the epoch's last step
  // Loss scaling at the epoch's end (scale 1 and zeros without a scaler).
  double loss_scale = 1.0;
  int64_t skipped_steps = 0;  // over the run so far
  int64_t steps_since_overflow = 0;
  // The input pipeline's per-stage counters since fit() started or resumed
  // (empty when batches are assembled on the main thread).
  std::vector<data::StageStats> input_stages;
};

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;
  int64_t examples = 0;
};

// One replica's share of a step. With the step's input time the parts add
// up to the step time. Forward and backward are the replica's own compute,
// measured up to the moment its gradients were ready and before it waits for
// any other replica, so a slow replica shows as slow here, not as everyone's
// long all-reduce. With several processes every replica is listed: durations
// are exchanged, and the exposed communication is the shortest wait (the
// slowest replica's), the rest of each replica's wait being idle.
struct ReplicaStepTime {
  int replica = 0;             // global replica index
  double forward = 0.0;        // forward pass and loss
  double backward = 0.0;       // backward, launching its all-reduces on the way
  double idle = 0.0;           // waiting: to start, for the slowest backward, for the step's end
  double communication = 0.0;  // all-reduce not hidden behind any replica's backward
  double optimizer = 0.0;      // unscale/check and the parameter update
};

struct StepInfo {
  int64_t epoch = 0;  // 1-based
  int64_t step = 0;   // within the epoch, 1-based
  int64_t steps_per_epoch = 0;
  int64_t global_step = 0;  // 1-based, over the whole run
  double loss = 0.0;
  double learning_rate = 0.0;
  int64_t batch_examples = 0;
  // Where the step's time went (seconds): assembling the batch on the main
  // thread (input), the whole step, and, as means over the replicas, the
  // communication not hidden behind backward and the time replicas waited
  // for others. `replicas` has each replica's breakdown: this process's, or
  // every process's under multi-worker.
  double input_seconds = 0.0;
  double step_seconds = 0.0;
  double exposed_communication_seconds = 0.0;
  double idle_seconds = 0.0;
  std::vector<ReplicaStepTime> replicas;
  // Local replica 0's gradient all-reduces, one per bucket (none on one device).
  std::vector<distribute::ReducerStats::Bucket> buckets;
  double loss_scale = 1.0;
  bool skipped = false;  // non-finite gradients: the update was skipped
};

struct TrainResult {
  std::vector<EpochResult> history;
  bool interrupted = false;  // stopped by request_stop(); a checkpoint was saved
  double wall_seconds = 0.0;
  int64_t resumed_from_step = 0;  // global step the run resumed at (0: fresh)
};

struct TrainCallbacks {
  std::function<void(const StepInfo&)> on_step;
  std::function<void(const EpochResult&)> on_epoch;
};

// Builds one replica's model; called once per local replica. Every call must
// build the same architecture (checked across replicas and workers).
using ModelFactory = std::function<std::shared_ptr<nn::Module>()>;

class Trainer {
 public:
  // Throws InvalidArgument for a configuration that cannot work (non-positive
  // epochs or batch size, a batch larger than the training set, a global batch
  // with fewer examples than replicas, a bad strategy, ...).
  Trainer(TrainConfig config, const ModelFactory& factory, data::LabeledImages train_data,
          data::LabeledImages test_data);
  // One device with this model (the strategy in config must be one_device).
  Trainer(TrainConfig config, std::shared_ptr<nn::Module> model, data::LabeledImages train_data,
          data::LabeledImages test_data);
  ~Trainer();

  // Trains config.epochs epochs (continuing from the checkpoint when resuming).
  TrainResult fit(const TrainCallbacks& callbacks = {});
  // Loss and accuracy over a dataset, in evaluation mode without gradients.
  EvalResult evaluate(const data::LabeledImages& data);

  // Asks fit() to stop after the current step, saving a checkpoint. Safe to
  // call from a signal handler or another thread.
  void request_stop() { stop_requested_.store(true); }

  // Local replica 0's model and optimizer (every replica holds the same values).
  nn::Module& model() { return *replicas_.front().model; }
  optim::Optimizer& optimizer() { return *replicas_.front().optimizer; }
  nn::Module& replica_model(int local_replica) { return *replicas_.at(local_replica).model; }
  distribute::Strategy& strategy() { return *strategy_; }
  std::string checkpoint_path() const;
  int64_t steps_per_epoch() const;

 private:
  struct Progress;
  struct Replica {
    // The current step's moments, written by the replica's own thread.
    struct Moments {
      std::chrono::steady_clock::time_point start, forward_done, backward_done, reduced, done;
    };
    Moments moments;
    std::shared_ptr<nn::Module> model;
    std::unique_ptr<optim::Optimizer> optimizer;
    std::unique_ptr<distribute::Reducer> reducer;
    std::unique_ptr<precision::LossScaler> scaler;  // null without loss scaling
    Tensor peer_times;  // multi-worker: every replica's step durations, 4 per replica
  };
  void build_replicas(const ModelFactory& factory);
  // Shares local replica i's step durations with every replica (multi-worker).
  void exchange_replica_times(int local_replica);
  // The last step's breakdown for every global replica, from the exchanged
  // durations; `after_input` is the step's time after its input was ready.
  std::vector<ReplicaStepTime> global_breakdown(
      std::chrono::steady_clock::duration after_input) const;
  // The last step's per-replica breakdown from the replicas' moments.
  std::vector<ReplicaStepTime> replica_breakdown(
      std::chrono::steady_clock::time_point input_done,
      std::chrono::steady_clock::time_point step_end) const;
  // Whether to stop now; agreed by all workers when there are several processes.
  bool should_stop();
  void check_and_broadcast_weights();
  // Sums values over every replica of every worker (each local replica passes its own).
  std::vector<double> sum_over_replicas(const std::vector<std::vector<double>>& per_replica);
  void save(const Progress& progress, const std::vector<EpochResult>& history);
  void restore(Progress& progress, std::vector<EpochResult>& history);

  TrainConfig config_;
  std::unique_ptr<distribute::Strategy> strategy_;
  std::vector<Replica> replicas_;
  data::LabeledImages train_, test_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  std::atomic<bool> stop_requested_{false};
};

}  // namespace tandem::train
