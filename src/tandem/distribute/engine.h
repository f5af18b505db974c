#pragma once
// Engine: what a strategy builds to train a model (Strategy::make_engine).
// It owns the replicas' models and optimizers, their gradient
// synchronisation and loss scaling, and takes one synchronous or
// asynchronous step on a batch through a user function; the Trainer is a
// loop over a Dataset that calls it, and a custom training loop calls it
// directly (examples/custom_loop.cc).
//
// Semantics of a step (tf.distribute's): the batch given to step() is this
// process's rows of the global batch; it is split between the local
// replicas (data::split_batch); each replica's forward returns per-example
// losses, and the engine differentiates their sum divided by the global
// batch's row count, so N replicas take the step one device takes on the
// whole batch. Every process must call step(), evaluate(), save_state() and
// load_state() in the same order (they are collectives); a process whose
// input has ended passes an empty batch (0 rows, same features).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/data/element.h"
#include "tandem/distribute/engine_state.h"
#include "tandem/distribute/reducer.h"
#include "tandem/distribute/replica_context.h"
#include "tandem/nn/module.h"
#include "tandem/optim/optimizer.h"
#include "tandem/precision/loss_scaler.h"

namespace tandem::distribute {

class Strategy;

// A replica slowed down on purpose (--slow-replica R:FACTOR): after its
// forward and backward it sleeps (factor - 1) times their duration, so that
// its compute takes `factor` times as long. For seeing, and testing, what a
// straggler does to each kind of training.
struct SlowReplica {
  int replica = -1;     // global replica index; -1: none
  double factor = 1.0;  // in [1, kMaxSlowFactor]
};
inline constexpr double kMaxSlowFactor = 1000.0;

// The parameter-server engine's settings (distribute/parameter_server.h).
struct ParameterServerOptions {
  int shards = 1;  // parameter-server shards the variables are partitioned over (--ps)
  // The largest staleness of an applied gradient: how many updates may land
  // between a worker's pull of the parameters and the update its gradient
  // makes. Unset: unbounded (fully asynchronous); 0: synchronous rounds.
  std::optional<int64_t> max_staleness;
  // Synchronous rounds (max_staleness 0) only: a round's update averages
  // the first `workers - backup_workers` gradients to arrive; later ones are
  // dropped (Chen et al. 2016).
  int backup_workers = 0;
  // Divide each asynchronous gradient's learning rate by its staleness (when
  // above 1; Zhang et al. 2016).
  bool staleness_aware_lr = false;
  // Variables of at least twice this many bytes are split along their first
  // axis into pieces of at least this size, over as many shards as that
  // allows (TensorFlow's MinSizePartitioner).
  int64_t min_shard_bytes = int64_t{256} << 10;
};

// Builds one replica's model; called once per local replica, on the main
// thread under the replica's device. Every call must build the same
// architecture (checked across replicas and processes at set-up).
using ModelBuilder = std::function<std::shared_ptr<nn::Module>()>;

struct EngineOptions {
  optim::OptimizerConfig optimizer;
  // Gradient synchronisation; reducer.zero_stage 1 or 2 shards the
  // optimizer state (and, at 2, the gradients) between the replicas (ZeRO,
  // distribute/sharded_optimizer.h; with one replica there is nothing to
  // shard and the update is the replicated one).
  ReducerOptions reducer;
  // Micro-batches per step (gradient accumulation, >= 1): each replica's
  // rows are split into this many consecutive micro-batches, whose forward
  // and backward run one after the other and whose gradients add up before
  // the one update; the gradients are reduced once, after the last (DDP's
  // no_sync), except under ZeRO-2, which reduces each into its shard. The
  // update equals one step on the whole batch for models without
  // batch-dependent layers (batch norm normalises each micro-batch).
  int accumulation_steps = 1;
  // Loss scaling (unset: none). With a scaler, steps whose reduced
  // gradients are not finite are skipped on every replica.
  std::optional<precision::LossScalerOptions> loss_scale;
  uint64_t seed = 0;  // each step's random streams (dropout), with the step index
  SlowReplica slow_replica;
  // > 0: local SGD: every replica updates its own copy from its own rows and
  // the copies are averaged every this many steps (and at synchronize());
  // the all-reduce engine only. 0: gradients all-reduced every step.
  int sync_every = 0;
  // Local SGD: average the optimizer state with the parameters.
  bool average_optimizer_state = false;
  ParameterServerOptions parameter_server;  // the parameter-server strategy's engine only
};

// One replica's share of a batch, as its forward function sees it.
struct ReplicaBatch {
  const data::Element& rows;  // this replica's rows (0 rows are possible)
  int64_t global_rows = 0;    // rows of the whole global batch
  const ReplicaContext& context;
};

// Forward on one replica's rows: returns the per-example losses, shape
// (rows,), any float dtype. Runs on the replica's thread, at the same time
// as the other replicas' calls: it must only touch the model it is given
// and state indexed by batch.context.local_replica.
using ForwardFn = std::function<Variable(nn::Module& model, const ReplicaBatch& batch)>;
// Evaluation on one replica's rows (no gradients, evaluation mode).
using EvaluateFn = std::function<void(nn::Module& model, const ReplicaBatch& batch)>;

struct StepOptions {
  int64_t step = 0;  // the global step index: seeds the random streams
  // Measure the squared gradient norms at two batch sizes for the gradient
  // noise scale (StepResult::gradient_norms): one pass over the gradients
  // before and one after their reduction, and a small exchange.
  bool measure_gradient_norms = false;
  std::optional<double> learning_rate;  // unset: the optimizers keep theirs
  // Rows of the global batch; -1: this process's rows when there is one
  // process, otherwise summed over the processes (one small exchange).
  int64_t global_rows = -1;
};

// One replica's share of a step (seconds). Forward and backward are the
// replica's own compute, measured up to the moment its gradients were ready
// and before it waits for any other replica, so a slow replica shows as slow
// here, not as everyone's long all-reduce. With several processes every
// replica is listed (durations are exchanged), and the exposed communication
// is the shortest wait (the slowest replica's), the rest of each wait idle.
struct ReplicaStepTime {
  int replica = 0;             // global replica index
  double forward = 0.0;        // forward pass and loss
  double backward = 0.0;       // backward, launching its all-reduces on the way
  double idle = 0.0;           // waiting: to start, for the slowest backward, for the step's end
  double communication = 0.0;  // all-reduce not hidden behind any replica's backward
  double optimizer = 0.0;      // unscale/check and the parameter update
  // Rows whose gradient the replica computed during the call: the
  // parameter server's workers, which take shares at their own pace; -1
  // where every replica computes its share of every step.
  int64_t examples = -1;
};

// Squared L2 norms of mean gradients (over examples, unscaled) at two batch
// sizes, for the gradient noise scale (train/noise_scale.h): each replica's
// own gradient before the reduction (small: its examples; averaged over the
// replicas) and the reduced one (big: the global batch). With one replica
// and accumulation, the first micro-batch's and the whole step's.
struct GradientNormSample {
  double small_batch = 0.0;  // examples behind each small gradient (mean over replicas)
  double big_batch = 0.0;    // examples behind the big one
  double small_squares = 0.0;
  double big_squares = 0.0;
};

struct StepResult {
  // The mean per-example loss of the global batch (over every process).
  double loss = 0.0;
  int64_t global_rows = 0;
  // Each local replica's sum of its per-example losses (exact, for epoch
  // sums; agreement::sum_over_replicas adds them over processes).
  std::vector<double> replica_loss_sums;
  bool skipped = false;  // non-finite gradients under loss scaling: no update
  double loss_scale = 1.0;
  // The global gradient norm before clipping (with optimizer.global_clip_norm
  // set; 0 otherwise).
  double gradient_norm = 0.0;
  double seconds = 0.0;  // the step, from the split of the batch to its end
  // Every replica's breakdown (this process's, or every process's when there
  // are several), and their means.
  std::vector<ReplicaStepTime> replicas;
  double exposed_communication_seconds = 0.0;
  double idle_seconds = 0.0;
  // Local replica 0's gradient all-reduces, one per bucket (none on one device).
  std::vector<ReducerStats::Bucket> buckets;
  // With StepOptions::measure_gradient_norms, when the step has two batch
  // sizes to compare (several replicas, or accumulation) and its gradients
  // were finite.
  std::optional<GradientNormSample> gradient_norms;
  // Asynchronous engines: how many of the gradients applied during the call
  // had each staleness (index: updates between the gradient's pull and its
  // application), and the rows each local replica trained on whose gradient
  // was dropped (late under backup workers). Empty for the others.
  std::vector<int64_t> staleness;
  std::vector<int64_t> dropped_rows;
  // The parameter server across processes: per local replica (worker), the
  // element-wise sums of what its worker process reported with the
  // gradients applied during the call (the Trainer's metric sums). Empty
  // when the workers run in this process (their forward functions ran here).
  std::vector<std::vector<double>> replica_reports;
};

// Adds b's per-call counts (loss sums, rows, staleness, dropped rows) into a.
void accumulate_step_counts(StepResult& a, const StepResult& b);

class Engine {
 public:
  virtual ~Engine() = default;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // "all_reduce" (synchronous, replicated optimizer), "zero1", "zero2"
  // (synchronous, sharded optimizer state / and gradients), ...
  virtual std::string name() const = 0;
  Strategy& strategy() const { return strategy_; }

  // Local replica i's model and optimizer (replicas hold the same values;
  // under ZeRO the optimizer is the one over replica i's shards).
  virtual nn::Module& model(int local_replica = 0) = 0;
  virtual optim::Optimizer& optimizer(int local_replica = 0) = 0;
  // The loss scaler (every replica's is in the same state), or null.
  virtual const precision::LossScaler* loss_scaler() const = 0;

  // Forward, loss, backward, gradient synchronisation and update on this
  // process's rows of a global batch. Throws what a forward throws (after
  // every replica returned), ShapeError for a loss that is not (rows,), and
  // InvalidArgument for a batch without features.
  //
  // An asynchronous engine (the parameter server) hands the batch to its
  // workers and returns before they are done: the result then covers the
  // work that finished during the call (global_rows counts its rows; 0 rows:
  // nothing finished, and the loss is NaN), and synchronize() returns the rest.
  virtual StepResult step(const data::Element& batch, const ForwardFn& forward,
                          const StepOptions& options = {}) = 0;
  // Brings every replica to one consistent state: waits for the work step()
  // handed out and puts the latest parameters into every replica (the
  // parameter server), or averages the replicas' copies (local SGD). Returns
  // what finished meanwhile, as step() does. The Trainer calls it before it
  // evaluates or saves; save_state() and load_state() call it themselves,
  // and so does the parameter server's evaluate() (under local SGD each
  // replica evaluates its own copy). The all-reduce engine also gives
  // every replica replica 0's buffers (batch norm's running statistics
  // drift apart on each replica's rows); with one replica it does nothing.
  virtual StepResult synchronize() { return {}; }
  // Runs fn on every local replica's share of `batch` in evaluation mode,
  // without gradients; the models' modes are restored afterwards. Involves
  // no other process: each evaluates its own batches.
  virtual void evaluate(const data::Element& batch, const EvaluateFn& fn) = 0;

  // The complete state, on the chief process (collective: every process
  // calls it; others may receive a partial or empty state).
  virtual EngineState save_state() = 0;
  // The same state given to `writer` tensor by tensor (collective, like
  // save_state). The default writes save_state()'s; an engine whose state
  // is sharded gathers and gives it piece by piece, so that no device ever
  // holds all of it (ZeRO).
  virtual void save_state(StateWriter& writer) { write_state(save_state(), writer); }
  // Loads a complete state into every local replica (every process calls
  // it with the same state). IoError naming the first tensor that is
  // missing or differs in shape or dtype.
  virtual void load_state(const EngineState& state) = 0;

 protected:
  explicit Engine(Strategy& strategy) : strategy_(strategy) {}

 private:
  Strategy& strategy_;
};

// The all-reduce engine every built-in strategy makes: replicated models,
// gradients summed by the Reducer (overlapping backward), identical updates
// on every replica: by a replicated optimizer, or under ZeRO by each
// replica's ShardedOptimizer followed by an all-gather of the parameters.
// Set-up checks that every replica built the same architecture and
// broadcasts global replica 0's weights. Throws InvalidArgument for
// accumulation_steps < 1 or a bad ZeRO stage.
// With options.sync_every > 0 it is local SGD instead: no gradient
// reduction, each replica steps on the mean of its own rows, and the
// replicas average their parameters every sync_every steps.
std::unique_ptr<Engine> make_all_reduce_engine(Strategy& strategy, const ModelBuilder& build,
                                               const EngineOptions& options);

// Throws InvalidArgument for settings no engine can honour: a slow replica
// that does not exist or a factor below 1, sync_every < 0, and
// parameter-server settings out of range for `workers` workers.
void check_engine_options(const EngineOptions& options, int workers);

}  // namespace tandem::distribute
