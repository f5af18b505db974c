#pragma once
// Trainer: Keras's fit() and evaluate() over data::Datasets, for any model,
// loss and metrics, on one device or replicated by a distribution strategy.
// The Trainer is a loop: the strategy's engine (distribute/engine.h) takes
// each step; the Trainer builds the input, keeps the schedule, the sums,
// the callbacks and the checkpoints.
//
// Input contract:
//  - The training Dataset yields single examples (elements of named
//    tensors: the model's input feature and whatever the loss and metrics
//    read). The Trainer batches them: each process takes its shard of the
//    data (data::auto_shard over the processes, TrainConfig::auto_shard),
//    batches it with its share of the global batch (global / processes),
//    and the engine splits each batch between the process's replicas.
//  - An epoch is one pass over the data (steps_per_epoch = 0), or
//    steps_per_epoch steps of one pass that runs across epochs (for
//    repeated, infinite datasets: Keras's steps_per_epoch), or, with
//    repeat, of passes that follow each other (tf.data's repeat()).
//  - Uneven inputs are normal: when one process's shard ends first it takes
//    part in the remaining steps with empty batches (every process agrees on
//    each step before taking it), so no process hangs, no example is
//    dropped, and the loss is averaged over the examples present.
//  - Pass k of the data is Dataset::iterator(k) in epoch k, so shuffles and
//    random maps are a function of the epoch. A resumed run replays the
//    checkpoint's epoch up to its step (re-reading the batches before it):
//    for a deterministic pipeline it continues with exactly the batches and
//    losses of an uninterrupted run; a non-deterministic one (a map or
//    interleave with deterministic = false) resumes after the same number of
//    batches, not necessarily the same examples.
// The learning rate is a function of the step; dropout masks of (seed, step,
// replica). Checkpoints hold the engine's state and the position, written
// by the chief, and load into any number of replicas.
//
// Elastic training (multi_worker under tandem launch --elastic): every
// TrainConfig::elastic_copy_every steps and at each epoch's start the
// members keep an in-memory copy of the training state. When a member is
// lost the others agree on the new membership (comm::ElasticGroup), build
// the strategy and engine again over it, take the new rank 0's copy (so
// the steps since it are taken again), and re-shard the epoch: step t
// always trains examples [t x global batch, (t+1) x global batch) of the
// epoch's order, whatever the membership, so no example is lost or seen
// twice and the run equals one device's on the same data. The global batch
// stays; each member's share becomes global / members (which must divide).
// A joiner (tandem launch --elastic --join) is taken in at the next step
// boundary the same way, without a rollback.

#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/data/dataset.h"
#include "tandem/data/distribute.h"
#include "tandem/data/stats.h"
#include "tandem/distribute/engine.h"
#include "tandem/distribute/strategy.h"
#include "tandem/optim/lr_schedule.h"
#include "tandem/optim/optimizer.h"
#include "tandem/precision/loss_scaler.h"
#include "tandem/train/loss.h"
#include "tandem/train/metric.h"
#include "tandem/train/model_factory.h"
#include "tandem/train/noise_scale.h"
#include "tandem/train/train_config.h"

namespace tandem::train {

// Where a resumed fit() continues: the checkpoint's position.
struct ResumePoint {
  int64_t epoch = 0;        // 0-based epoch it continues
  int64_t step = 0;         // next step inside it
  int64_t global_step = 0;  // steps taken so far
  // TrainConfig::epochs of the run that wrote the checkpoint (0: not
  // recorded, an earlier version's checkpoint). When it differs from this
  // run's, the cosine schedule decays over the new total from here on: the
  // learning rate does not continue the curve the run started on.
  int64_t epochs = 0;
};

struct EpochResult {
  int64_t epoch = 0;  // 1-based
  // Mean per-example loss over the epoch's training examples, and the
  // configured metrics (name, value) over them; likewise over the
  // validation data (NaN and empty without it).
  double train_loss = 0.0;
  std::vector<std::pair<std::string, double>> train_metrics;
  double validation_loss = 0.0;
  std::vector<std::pair<std::string, double>> validation_metrics;
  // Whether validation data was evaluated (its loss may be NaN too: a
  // diverged model's).
  bool validated = false;
  int64_t train_examples = 0;  // over every process
  // Steps whose loss was not finite (skipped under loss scaling): their
  // examples are counted here, not in train_loss.
  int64_t nonfinite_steps = 0;
  double examples_per_second = 0.0;  // training examples over training time
  double train_seconds = 0.0;
  double learning_rate = 0.0;  // at the epoch's last step
  // Loss scaling at the epoch's end (scale 1 and zeros without a scaler).
  double loss_scale = 1.0;
  int64_t skipped_steps = 0;  // over the run so far
  int64_t steps_since_overflow = 0;
  // The smoothed gradient noise scale B_simple at the epoch's end, in
  // examples (NaN when not measured).
  double noise_scale = NAN;
  // The input pipeline's per-stage counters since fit() started or resumed.
  std::vector<data::StageStats> input_stages;
  // The parameter_server strategy: how many applied gradients had each
  // staleness (index: updates between a gradient's pull and its
  // application), and each replica's training examples whose gradient was
  // dropped (late under backup workers). Empty under the other strategies.
  std::vector<int64_t> staleness;
  std::vector<int64_t> dropped_examples;
  // The mean of `staleness` (NaN when empty).
  double mean_staleness() const;

  // The named metric's value (NaN when the run has no such metric).
  double train_metric(const std::string& name) const;
  double validation_metric(const std::string& name) const;
};

struct EvalResult {
  double loss = 0.0;
  std::vector<std::pair<std::string, double>> metrics;
  int64_t examples = 0;
  double metric(const std::string& name) const;  // NaN when absent
};

using distribute::ReplicaStepTime;

struct StepInfo {
  int64_t epoch = 0;            // 1-based
  int64_t step = 0;             // within the epoch, 1-based
  int64_t steps_per_epoch = 0;  // 0: not known (a dataset of unknown size)
  int64_t global_step = 0;      // 1-based, over the whole run
  double loss = 0.0;            // mean per-example loss of the global batch
  double learning_rate = 0.0;
  int64_t batch_examples = 0;  // global
  // Where the step's time went (seconds): waiting for this process's batch
  // (input), the whole step, and, as means over the replicas, the
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
  // The global norm of the reduced, unscaled gradients before clipping; NaN
  // without OptimizerConfig::global_clip_norm (it is not computed then),
  // inf on a step skipped for non-finite gradients.
  double gradient_norm = NAN;
  // The smoothed gradient noise scale B_simple so far, in examples (NaN
  // until measured; TrainConfig::noise_scale_every).
  double noise_scale = NAN;
  bool skipped = false;  // non-finite gradients: the update was skipped
};

struct TrainResult {
  std::vector<EpochResult> history;
  bool interrupted = false;  // stopped by request_stop(); a checkpoint was saved
  bool paused = false;       // stopped at TrainConfig::stop_after_epochs; likewise
  // With steps_per_epoch: the data ended before the last epoch's last step
  // (Keras stops the same way); the history ends with that partial epoch.
  bool input_exhausted = false;
  double wall_seconds = 0.0;
  int64_t resumed_from_step = 0;  // global step the run resumed at (0: fresh)
};

// An elastic job's membership changed (tandem launch --elastic; see
// Trainer): reported once training goes on with the new members.
struct MembershipChange {
  int64_t generation = 0;
  std::vector<int> members;       // member ids of the new generation
  std::vector<int> lost, joined;  // against the previous generation
  std::string reason;             // what set it off
  int64_t global_step = 0;        // the step training goes on from
  int64_t rolled_back_steps = 0;  // steps taken again (since the last state copy)
  // From the end of the last step before the change to going on (detection,
  // agreement, rebuilding the communicators and replicas, the state copy).
  double seconds = 0.0;
  int64_t process_batch = 0;  // each member's share of the global batch now
};

// The batch a step has just trained on, as this process fed it to its
// replicas (after the batch transform; on the devices the step used).
struct TrainedBatch {
  const data::Element& batch;
  int64_t epoch = 0;        // 0-based, as Progress counts
  int64_t global_step = 0;  // counting this step
  int64_t generation = 0;   // the elastic membership's (0 when not elastic)
};

struct TrainCallbacks {
  std::function<void(const TrainedBatch&)> on_batch;
  std::function<void(const StepInfo&)> on_step;
  std::function<void(const EpochResult&)> on_epoch;
  std::function<void(const MembershipChange&)> on_membership_change;
};

class Trainer {
 public:
  // Builds the strategy and the engine (every replica's model); config()
  // then holds the resolved batch sizes. Throws InvalidArgument for a
  // configuration that cannot work (non-positive epochs or batch size,
  // batch sizes that do not divide or disagree, a bad strategy, optimizer
  // setting or schedule, ...).
  Trainer(TrainConfig config, ModelFactory model);
  // One device with this model (the strategy in config must be one_device).
  Trainer(TrainConfig config, std::shared_ptr<nn::Module> model, std::string name = "model");
  ~Trainer();

  // With config.resume: reads the checkpoint in the output directory and
  // checks it against this Trainer (model, the settings a resume must keep,
  // metrics, epochs left to train), so that a run that cannot resume fails
  // before anything is written; the next fit() continues from it without
  // reading it again (fit() calls this itself otherwise). Throws
  // InvalidArgument when there is no run to resume ("no run to resume at
  // DIR": no directory, or no checkpoint in it), when the checkpoint does not
  // match or has trained all config.epochs, IoError when it cannot be read;
  // InvalidArgument without config.resume.
  const ResumePoint& prepare_resume();
  // For a run that does not resume: throws InvalidArgument when its output
  // directory already holds a checkpoint (collective over the job's
  // processes), before anything there is written; fit() checks it too.
  void check_fresh_output();

  // Trains config.epochs epochs on `train` (continuing from the checkpoint
  // when resuming), evaluating on `validation` after each. Throws what the
  // data, the model or the loss throws; InvalidArgument for data that cannot
  // work (no rows, a missing feature, a schedule that needs a size the data
  // does not have), and what prepare_resume() throws. Whatever fails on one
  // process breaks the strategy's communicators (Strategy::abort), so the
  // other processes end with PeerFailed naming this one instead of waiting.
  TrainResult fit(const data::Dataset& train, const std::optional<data::Dataset>& validation = {},
                  const TrainCallbacks& callbacks = {});
  // Loss and metrics over a dataset of single examples, in evaluation mode
  // without gradients; each process evaluates its shard.
  EvalResult evaluate(const data::Dataset& data);

  // Asks fit() to stop after the current step, saving a checkpoint (a fit
  // still setting up stops at its first step boundary). Safe to call from a
  // signal handler or another thread; the request ends with the fit.
  void request_stop() { stop_requested_.store(true); }

  // A worker or shard rank of the parameter-server strategy across
  // processes (strategy().serves_chief(); distribute/parameter_server_processes.h)
  // does not run fit(): a worker computes the chief's shares of batches with
  // this Trainer's model, loss and metrics, a shard rank keeps a shard of
  // the model's variables, until the chief ends the run. Throws PeerFailed
  // when a server rank is lost.
  void serve_remote_work();

  // Local replica 0's model and optimizer (every replica holds the same values).
  nn::Module& model() { return engine_->model(0); }
  optim::Optimizer& optimizer() { return engine_->optimizer(0); }
  nn::Module& replica_model(int local_replica) { return engine_->model(local_replica); }
  distribute::Strategy& strategy() { return *strategy_; }
  distribute::Engine& engine() { return *engine_; }
  const ModelSpec& model_spec() const { return model_.spec; }
  const TrainConfig& config() const { return config_; }
  std::string checkpoint_path() const;
  // Global steps per epoch for this training data: steps_per_epoch, or from
  // the data's cardinality (the largest process shard's batches); 0 when
  // the size is not known (and, for a joiner of an elastic job, before its
  // fit() takes the members' state). Collective when there are several
  // processes.
  int64_t steps_per_epoch(const data::Dataset& train);

 private:
  struct Progress;
  struct Input;
  struct StepInput;
  struct PendingResume;
  struct ElasticState;
  enum class EpochEnd : uint8_t;
  TrainResult run_fit(const data::Dataset& train, const std::optional<data::Dataset>& validation,
                      const TrainCallbacks& callbacks);
  // The rest of progress.epoch from input's position, and its end (the
  // epoch's result, a checkpoint, the next epoch's start); how it ended.
  EpochEnd run_epoch(Input& input, Progress& progress, TrainResult& result,
                     const distribute::ForwardFn& forward,
                     const std::optional<data::Dataset>& validation,
                     const TrainCallbacks& callbacks);
  // A pass over `train`'s batches for this membership, at progress's
  // position (the batches before it read and dropped).
  void open_input(Input& input, const data::Dataset& train, const Progress& progress);
  // One step's batch read and dropped (replaying to a position), the pass
  // ending when the job's does, as in next_step_input; false at the end of
  // the data. Collective over the processes.
  bool replay_step(Input& input);
  // Elastic training (trainer_elastic.cc): joins the job's membership
  // (before the strategy is built); the in-memory copy of the state; the
  // move to a new membership, rolled back to the last copy and reported.
  void start_elastic();
  void copy_state(Progress& progress, const std::vector<EpochResult>& history);
  // The settings every member must share, and the refusal of a member
  // whose settings differ from the job's (collective over the members).
  std::map<std::string, std::string> elastic_settings();
  void check_elastic_settings();
  void adopt_shared_state(Progress& progress, TrainResult& result);
  void change_membership(Progress& progress, TrainResult& result, const std::string& reason,
                         const TrainCallbacks& callbacks);
  // fit()'s steps: checks, restore and set-up; the next step's batch once
  // every process agreed on it; one step and its accounting.
  void begin_fit(const data::Dataset& train, Progress& progress, TrainResult& result);
  StepInput next_step_input(Input& input, const Progress& progress);
  void train_step(const StepInput& input, const distribute::ForwardFn& forward, Progress& progress,
                  const TrainCallbacks& callbacks);
  // Adds the work a step or synchronize() reports as finished to the
  // epoch's sums; throws Diverged for a non-finite loss without a scaler.
  void absorb(const distribute::StepResult& r, Progress& progress);
  // engine.synchronize() (the work an asynchronous engine still has, local
  // SGD's average), absorbed; before an epoch's end or a save.
  void synchronize_engine(Progress& progress);
  // This process's shard of `examples` in batches (padded when configured).
  data::Dataset batched(const data::Dataset& examples, int64_t batch_size,
                        bool drop_remainder) const;
  // The training batches: batched, transformed, prefetched.
  data::Dataset process_batches(const data::Dataset& train) const;
  distribute::ForwardFn training_forward();
  // The engine settings this configuration asks for.
  distribute::EngineOptions engine_options() const;
  void make_schedule(int64_t steps_per_epoch);
  EpochResult finish_epoch(Progress& progress, const std::optional<data::Dataset>& validation);
  // The settings a checkpoint records and a resume must match, as metadata.
  std::vector<std::pair<std::string, std::string>> resume_settings();
  void save(const Progress& progress, const std::vector<EpochResult>& history);
  // The position, the epoch's sums (over every replica) and the history, as
  // a checkpoint's metadata holds them; read back (IoError when malformed,
  // InvalidArgument when its metrics are not this run's; `source` names it).
  void write_position(const Progress& progress, const std::vector<EpochResult>& history,
                      std::map<std::string, std::string>& metadata) const;
  void read_position(const distribute::EngineState& state, const std::string& source,
                     Progress& progress, std::vector<EpochResult>& history) const;
  void check_position(const Progress& progress, const std::vector<EpochResult>& history,
                      const std::string& source) const;

  TrainConfig config_;
  ModelFactory model_;
  std::unique_ptr<distribute::Strategy> strategy_;
  std::unique_ptr<distribute::Engine> engine_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  int64_t steps_per_epoch_ = 0;  // of the current fit (0: unknown)
  // Consecutive steps skipped by the loss scaler or with a non-finite loss
  // (Progress::steps_without_update, checkpointed): fit() gives up at this.
  static constexpr int64_t kMaxStepsWithoutUpdate = 32;
  // Per local replica: this epoch's metric sums (sum, count per metric).
  std::vector<std::vector<MetricSums>> metric_sums_;
  // Per local replica, the step's, which join metric_sums_ only when its
  // loss is finite (as its loss and examples do); an asynchronous engine
  // (parameter servers) measures straight into metric_sums_ instead.
  std::vector<std::vector<MetricSums>> step_metric_sums_;
  void reset_metric_sums();
  std::atomic<bool> stop_requested_{false};
  // Read and checked by prepare_resume(), taken by the next fit().
  std::unique_ptr<PendingResume> pending_resume_;
  std::unique_ptr<ElasticState> elastic_;  // under tandem launch --elastic
};

}  // namespace tandem::train
