// The all-reduce engine: replicated models and optimizers, gradients summed
// over every replica by the Reducer while backward runs, the same update on
// every replica. Replicas stay bit-identical, so one replica's state is the
// whole state. Under local SGD (sync_every > 0) there is no Reducer: each
// replica steps on its own rows and the replicas average their parameters
// every sync_every steps, so they are identical after each average.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/trace.h"
#include "tandem/data/distribute.h"
#include "tandem/distribute/agreement.h"
#include "tandem/distribute/detail/engine_parts.h"
#include "tandem/distribute/engine.h"
#include "tandem/distribute/sharded_optimizer.h"
#include "tandem/distribute/strategy.h"
#include "tandem/kernels/reduce.h"
#include "tandem/tensor/device_clock.h"

namespace tandem::distribute {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::max(0.0, std::chrono::duration<double>(to - from).count());
}

using detail::rows_of;
using detail::seconds;

class AllReduceEngine : public Engine {
 public:
  AllReduceEngine(Strategy& strategy, const ModelBuilder& build, const EngineOptions& options);
  ~AllReduceEngine() override {
    // Reducers hold hooks on the replicas' parameters and work on their communicators.
    for (Replica& r : replicas_) r.reducer.reset();
  }

  std::string name() const override {
    if (local_sgd()) return "local_sgd";
    return sharded() ? "zero" + std::to_string(options_.reducer.zero_stage) : "all_reduce";
  }
  nn::Module& model(int local_replica) override { return *replicas_.at(local_replica).model; }
  optim::Optimizer& optimizer(int local_replica) override {
    Replica& r = replicas_.at(local_replica);
    return r.sharded ? r.sharded->optimizer() : *r.optimizer;
  }
  const precision::LossScaler* loss_scaler() const override {
    return replicas_.front().scaler.get();
  }

  StepResult step(const data::Element& batch, const ForwardFn& forward,
                  const StepOptions& options) override;
  StepResult synchronize() override;
  void evaluate(const data::Element& batch, const EvaluateFn& fn) override;
  EngineState save_state() override;
  void save_state(StateWriter& writer) override;
  void load_state(const EngineState& state) override;

 private:
  struct Replica {
    // The current step's moments, written by the replica's own thread.
    // With several micro-batches, forward is the sum of their forward
    // passes and backward the rest of the time up to backward_done.
    struct Moments {
      Clock::time_point start, backward_done, reduced, done;
      Clock::duration forward{};
    };
    Moments moments;
    std::shared_ptr<nn::Module> model;
    std::unique_ptr<optim::Optimizer> optimizer;  // null under ZeRO
    std::unique_ptr<Reducer> reducer;
    std::unique_ptr<ShardedOptimizer> sharded;      // ZeRO only
    std::unique_ptr<precision::LossScaler> scaler;  // null without loss scaling
    double loss_sum = 0.0;                          // this step's sum of per-example losses
    // With StepOptions::measure_gradient_norms: sums of squares of the
    // gradient before (local) and after (reduced) the reduction, still
    // multiplied by the loss scale, and the rows behind the local one.
    double local_squares = 0.0, reduced_squares = 0.0, local_rows = 0.0;
    // Several processes: every replica's step record, in global replica
    // order, exact (the loss sums are the step loss's terms).
    std::vector<double> peer_records;
    // Several processes: how long the previous step's record exchange took
    // here (the exchange cannot carry its own duration).
    double last_exchange = 0.0;
  };
  // Fields of the record each replica shares after a step when there are
  // several processes (their clocks differ, so durations, not moments):
  // forward, backward, wait, optimizer, loss sum, previous exchange.
  static constexpr int kRecordFields = 6;

  // ZeRO with more than one replica (with one there is nothing to shard).
  bool sharded() const {
    return options_.reducer.zero_stage > 0 && strategy().global_replicas() > 1;
  }
  bool local_sgd() const { return options_.sync_every > 0; }
  // Local SGD: replica r's parameters (and optimizer state, when asked)
  // become the mean over the replicas (collective).
  void average_replicas(int r);
  void average_optimizer_state(int r);
  // synchronize(), and under local SGD the optimizer states' mean too.
  void synchronize_for_saving();
  void check_same_architecture();
  void broadcast_weights();
  // loss_divisor: what the summed losses are divided by (the global rows;
  // a replica's own rows under local SGD).
  void run_micro_batches(Replica& rep, const data::Element& rows, int64_t global_rows,
                         int64_t loss_divisor, const ReplicaContext& context,
                         const ForwardFn& forward, bool measure);
  // The gradient norm sample of a measured step, from every replica's sums
  // (exchanged when there are several); on every replica's thread.
  std::optional<GradientNormSample> gradient_norm_sample(Replica& rep, int r, int64_t global_rows);
  // Moves a GPU replica's backward and optimizer ends to when the device
  // finished them (the marks were recorded as the host queued them).
  static void device_timeline(Replica::Moments& m, const DeviceMark& started,
                              const DeviceMark& backward_queued, const DeviceMark& done_queued);
  void update(Replica& rep, int r, bool& skipped);
  void run_replica_step(int r, const std::vector<data::Element>& parts, int64_t global_rows,
                        const ForwardFn& forward, const StepOptions& options, bool& skipped);
  void exchange_records(int local_replica);
  std::vector<ReplicaStepTime> local_breakdown(Clock::time_point start,
                                               Clock::time_point end) const;
  std::vector<ReplicaStepTime> global_breakdown(Clock::duration span) const;
  bool several_processes() const {
    return strategy().global_replicas() > strategy().local_replicas();
  }

  EngineOptions options_;
  double gradient_norm_ = 0.0;                        // of the last step (written by replica 0)
  std::optional<GradientNormSample> gradient_norms_;  // of the last step (replica 0)
  std::vector<Replica> replicas_;
};

AllReduceEngine::AllReduceEngine(Strategy& strategy, const ModelBuilder& build,
                                 const EngineOptions& options)
    : Engine(strategy), options_(options) {
  if (!build) TANDEM_THROW(InvalidArgument, "an engine needs a model builder");
  if (options.accumulation_steps < 1) {
    TANDEM_THROW(InvalidArgument,
                 "gradient accumulation needs at least 1 micro-batch per step, got ",
                 options.accumulation_steps);
  }
  if (options.reducer.zero_stage < 0 || options.reducer.zero_stage > 2) {
    TANDEM_THROW(InvalidArgument, "ZeRO stage must be 0 (off), 1 or 2, got ",
                 options.reducer.zero_stage, " (stage 3, sharded parameters, is not offered)");
  }
  check_engine_options(options, strategy.global_replicas());
  if (local_sgd() && options.reducer.zero_stage > 0) {
    TANDEM_THROW(InvalidArgument,
                 "local SGD (--sync-every) keeps a whole optimizer on every "
                 "replica; it does not combine with ZeRO (--zero)");
  }
  if (local_sgd() && strategy.global_replicas() < 2) {
    TANDEM_THROW(InvalidArgument,
                 "local SGD (--sync-every) averages replicas, and this strategy "
                 "has one (use --strategy mirrored or multi-worker)");
  }
  std::exception_ptr failed;
  try {
    for (int r = 0; r < strategy.local_replicas(); ++r) {
      // Each replica's parameters and state live on its device.
      DeviceScope device(strategy.device(r));
      Replica replica;
      replica.model = build();
      if (!replica.model) TANDEM_THROW(InvalidArgument, "the model builder returned no model");
      // Under ZeRO each replica's optimizer is built over its shards, below.
      if (sharded()) {
        optim::check_optimizer_config(options.optimizer);
        const optim::OptimizerKind kind = options.optimizer.kind;
        if (kind == optim::OptimizerKind::lars || kind == optim::OptimizerKind::lamb) {
          TANDEM_THROW(InvalidArgument, "--optimizer ", optim::optimizer_name(kind),
                       " scales each parameter's step by its own norms, which ZeRO's shards cut "
                       "across; use it without --zero");
        }
      } else {
        replica.optimizer = optim::make_optimizer(options.optimizer, replica.model->parameters());
      }
      if (options.loss_scale)
        replica.scaler = std::make_unique<precision::LossScaler>(*options.loss_scale);
      // On a GPU the parameters' initial values were queued on this
      // thread's stream; the replica's thread works on its own.
      tandem::synchronize(strategy.device(r));
      replicas_.push_back(std::move(replica));
    }
  } catch (...) {
    // Other processes wait for this one in the architecture check: tell them.
    if (!several_processes()) throw;
    failed = std::current_exception();
  }
  if (several_processes() && any_process(strategy, failed != nullptr)) {
    if (failed) std::rethrow_exception(failed);
    TANDEM_THROW(Error, "another worker failed to build its model (its error is in its output)");
  }
  if (strategy.global_replicas() > 1) {
    check_same_architecture();
    broadcast_weights();
    for (int r = 0; r < strategy.local_replicas() && !local_sgd(); ++r) {
      DeviceScope device(strategy.device(r));
      replicas_[r].reducer = std::make_unique<Reducer>(replicas_[r].model->parameters(),
                                                       *strategy.communicator(r), options.reducer);
      if (sharded()) {
        replicas_[r].sharded = std::make_unique<ShardedOptimizer>(
            replicas_[r].model->parameters(), *replicas_[r].reducer, *strategy.communicator(r),
            options.optimizer);
      }
      tandem::synchronize(strategy.device(r));  // their buffers' fills, as above
    }
  }
}

void AllReduceEngine::check_same_architecture() {
  // Every replica's parameter count and shapes, hashed (FNV-1a over the
  // dimensions, exact in a double's 53 bits) and compared across replicas.
  std::vector<std::vector<double>> signatures;
  for (const Replica& r : replicas_) {
    uint64_t hash = 1469598103934665603ull;
    int64_t count = 0;
    for (const auto& [name, p] : r.model->named_parameters()) {
      ++count;
      for (int64_t d : p.shape().dims())
        hash = (hash ^ static_cast<uint64_t>(d)) * 1099511628211ull;
      hash = (hash ^ 0xFFu) * 1099511628211ull;  // end of a parameter
    }
    signatures.push_back({static_cast<double>(hash >> 11), static_cast<double>(count)});
  }
  const std::vector<double> all = gather_over_replicas(strategy(), signatures);
  for (size_t g = 1; 2 * g < all.size(); ++g) {
    if (all[2 * g] != all[0] || all[2 * g + 1] != all[1]) {
      TANDEM_THROW(InvalidArgument, "replicas were built with different models: global replica ", g,
                   " has ", all[2 * g + 1], " parameters (or other shapes) against ", all[1],
                   " on replica 0 (every replica and worker must build the same architecture)");
    }
  }
}

void AllReduceEngine::broadcast_weights() {
  strategy().run([&](int r) {
    comm::Communicator& comm = *strategy().communicator(r);
    for (auto& [name, p] : replicas_[r].model->named_parameters()) {
      comm.broadcast(p.value(), 0);
      p.mark_modified();
    }
    for (auto& [name, t] : replicas_[r].model->named_buffers()) comm.broadcast(*t, 0);
  });
}

StepResult AllReduceEngine::step(const data::Element& batch, const ForwardFn& forward,
                                 const StepOptions& options) {
  if (batch.size() == 0) TANDEM_THROW(InvalidArgument, "a step needs a batch with features");
  if (!forward) TANDEM_THROW(InvalidArgument, "a step needs a forward function");
  const auto start = Clock::now();
  const int local = strategy().local_replicas();
  const std::vector<data::Element> parts = data::split_batch(batch, local);
  int64_t global_rows = options.global_rows;
  if (global_rows < 0) {
    const int64_t mine = rows_of(batch);
    global_rows =
        several_processes() ? sum_over_processes(strategy(), std::span(&mine, 1))[0] : mine;
  }
  if (global_rows < 1) {
    TANDEM_THROW(InvalidArgument, "a step needs at least one row in the global batch, got ",
                 global_rows);
  }
  bool skipped = false;
  gradient_norms_.reset();
  strategy().run(
      [&](int r) { run_replica_step(r, parts, global_rows, forward, options, skipped); });
  const auto end = Clock::now();

  StepResult result;
  result.global_rows = global_rows;
  result.skipped = skipped;
  result.gradient_norm = gradient_norm_;
  if (!skipped) result.gradient_norms = gradient_norms_;
  result.seconds = seconds_between(start, end);
  if (const precision::LossScaler* s = loss_scaler()) result.loss_scale = s->scale();
  double loss_sum = 0.0;
  for (const Replica& r : replicas_) {
    result.replica_loss_sums.push_back(r.loss_sum);
    loss_sum += r.loss_sum;
  }
  if (several_processes()) {
    loss_sum = 0.0;
    const std::vector<double>& t = replicas_.front().peer_records;
    for (int g = 0; g < strategy().global_replicas(); ++g) loss_sum += t[kRecordFields * g + 4];
    result.replicas = global_breakdown(end - start);
  } else {
    result.replicas = local_breakdown(start, end);
  }
  result.loss = loss_sum / static_cast<double>(global_rows);
  for (const ReplicaStepTime& t : result.replicas) {
    result.idle_seconds += t.idle;
    result.exposed_communication_seconds += t.communication;
  }
  const auto n = static_cast<double>(result.replicas.size());
  result.idle_seconds /= n;
  result.exposed_communication_seconds /= n;
  if (replicas_.front().reducer) result.buckets = replicas_.front().reducer->last_step().buckets;
  return result;
}

void AllReduceEngine::run_replica_step(int r, const std::vector<data::Element>& parts,
                                       int64_t global_rows, const ForwardFn& forward,
                                       const StepOptions& options, bool& skipped) {
  Replica& rep = replicas_[r];
  const ReplicaContext& context = strategy().replica_context(r);
  rep.moments = {};
  rep.moments.start = Clock::now();
  // On a GPU the phases end when the device finishes them, not when the
  // host has queued them (see device_timeline below).
  const bool gpu = context.device.kind != DeviceKind::cpu;
  std::optional<DeviceMark> started, backward_queued, done_queued;
  if (gpu) started = DeviceMark::record(context.device);
  if (options.learning_rate) optimizer(r).set_learning_rate(*options.learning_rate);
  seed_replica_generator(options_.seed, options.step, context);
  for (Variable& p : rep.model->parameters()) p.zero_grad();
  // With one replica and one micro-batch there is no second batch size.
  // Local SGD reduces no gradient: there is no big batch to compare with.
  const bool measure = options.measure_gradient_norms && !local_sgd() &&
                       (strategy().global_replicas() > 1 || options_.accumulation_steps > 1);
  const int64_t own_rows = rows_of(parts[r]);
  const int64_t divisor = local_sgd() ? std::max<int64_t>(own_rows, 1) : global_rows;
  run_micro_batches(rep, parts[r], global_rows, divisor, context, forward, measure);
  detail::slow_down(options_.slow_replica, context.global_replica,
                    Clock::now() - rep.moments.start);
  rep.moments.backward_done = Clock::now();
  if (gpu) backward_queued = DeviceMark::record(context.device);
  if (rep.reducer) {
    trace::Span span("wait for gradients", "step");
    rep.reducer->finish();
    if (measure) {
      rep.local_squares = rep.reducer->last_step().local_squares;
      rep.reduced_squares = rep.reducer->last_step().reduced_squares;
    }
  } else if (measure) {
    rep.reduced_squares = 0.0;
    for (const Variable& p : rep.model->parameters())
      if (p.has_grad()) rep.reduced_squares += kernels::squared_norm(p.grad());
  }
  if (measure) {
    std::optional<GradientNormSample> sample = gradient_norm_sample(rep, r, global_rows);
    if (r == 0) gradient_norms_ = sample;
  }
  rep.moments.reduced = Clock::now();
  {
    trace::Span span("optimizer", "step");
    // A replica without rows has no gradient of its own to step on.
    if (!local_sgd() || own_rows > 0) update(rep, r, skipped);
    if (local_sgd() && (options.step + 1) % options_.sync_every == 0) average_replicas(r);
  }
  rep.moments.done = Clock::now();
  if (gpu) {
    done_queued = DeviceMark::record(context.device);
    device_timeline(rep.moments, *started, *backward_queued, *done_queued);
  }
  if (several_processes()) exchange_records(r);
}

void AllReduceEngine::device_timeline(Replica::Moments& m, const DeviceMark& started,
                                      const DeviceMark& backward_queued,
                                      const DeviceMark& done_queued) {
  // The device's own times, placed on the host clock from the step's start
  // (the stream is idle then: the previous step waited for its last mark).
  // Backward ends when its last kernel does, which the gradient reduction
  // waited for, so no later than `reduced`; the optimizer's kernels end
  // when the step's last mark is reached, which this waits for.
  const auto after_start = [&](const DeviceMark& mark) {
    return m.start + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(started.seconds_until(mark)));
  };
  m.backward_done = std::clamp(after_start(backward_queued), m.backward_done, m.reduced);
  m.done = std::max(after_start(done_queued), m.done);
}

void AllReduceEngine::run_micro_batches(Replica& rep, const data::Element& rows,
                                        int64_t global_rows, int64_t loss_divisor,
                                        const ReplicaContext& context, const ForwardFn& forward,
                                        bool measure) {
  // A replica with no rows (an epoch's last, short batch; a worker whose
  // input ended) still runs its empty batches: cross-replica layers and the
  // gradient reduction need every replica.
  const int steps = options_.accumulation_steps;
  const std::vector<data::Element> micro =
      steps == 1 ? std::vector<data::Element>{rows} : data::split_batch(rows, steps);
  const bool stage2 = rep.reducer && rep.reducer->zero_stage() == 2;
  rep.loss_sum = 0.0;
  // The rows behind the gradient a replica holds before its reduction: all
  // of its share, but under ZeRO-2 (reduced micro-batch by micro-batch) the
  // last micro-batch, and with one replica the first micro-batch (measured
  // here, against the accumulated step).
  rep.local_rows = static_cast<double>(rep.reducer ? rows_of(stage2 ? micro.back() : rows)
                                                   : rows_of(micro.front()));
  for (int k = 0; k < steps; ++k) {
    const bool last = k == steps - 1;
    // Earlier micro-batches add up locally (no_sync); ZeRO-2 keeps no whole
    // gradient, so it reduces each one and adds it to its shard.
    if (rep.reducer) {
      rep.reducer->prepare(/*synchronize=*/last || stage2, /*accumulate=*/stage2 && k > 0,
                           /*measure_norms=*/measure);
    }
    const auto forward_start = Clock::now();
    Variable loss;
    {
      trace::Span span("forward", "step");
      const Variable per_example =
          forward(*rep.model, {on_device(micro[k], context.device), global_rows, context});
      const int64_t n = rows_of(micro[k]);
      if (!per_example.defined() || per_example.shape() != Shape{n}) {
        TANDEM_THROW(ShapeError, "the forward function must return per-example losses of shape (",
                     n, "), got ",
                     per_example.defined() ? per_example.shape().to_string() : "nothing");
      }
      const Variable total = sum(per_example);
      rep.loss_sum += static_cast<double>(total.value().item());
      // Normalised by the global batch, the replicas' gradients sum to the
      // batch mean; under local SGD each is its own rows' mean.
      loss = scale(total, static_cast<float>(1.0 / static_cast<double>(loss_divisor)));
    }
    rep.moments.forward += Clock::now() - forward_start;
    {
      trace::Span span("backward", "step");
      (rep.scaler ? rep.scaler->scale_loss(loss) : loss).backward();
    }
    // The last micro-batch's reduction is the step's wait for gradients.
    if (rep.reducer && !last) rep.reducer->finish();
    if (measure && !rep.reducer && k == 0) {
      rep.local_squares = 0.0;
      for (const Variable& p : rep.model->parameters())
        if (p.has_grad()) rep.local_squares += kernels::squared_norm(p.grad());
    }
  }
}

std::optional<GradientNormSample> AllReduceEngine::gradient_norm_sample(Replica& rep, int r,
                                                                        int64_t global_rows) {
  // Every loss was divided by the global rows: a replica's gradient over its
  // b rows is (b / B) times their mean gradient. The loss scale is still in.
  const double scale = rep.scaler ? rep.scaler->scale() : 1.0;
  const double unscale = 1.0 / (scale * scale);
  const auto B = static_cast<double>(global_rows);
  std::vector<double> all = {rep.local_squares * unscale, rep.local_rows,
                             rep.reduced_squares * unscale};
  if (comm::Communicator* comm = strategy().communicator(r))
    all = gather_in_group(*comm, all);  // every replica's three, in rank order
  // With a Reducer each replica measured its share of the reduced gradient;
  // with one replica, all of it.
  GradientNormSample sample{.big_batch = B};
  int counted = 0;
  for (size_t i = 0; i + 2 < all.size(); i += 3) {
    sample.big_squares += all[i + 2];
    const double rows = all[i + 1];
    if (rows <= 0.0) continue;
    sample.small_squares += (B / rows) * (B / rows) * all[i];
    sample.small_batch += rows;
    ++counted;
  }
  if (counted == 0) return std::nullopt;
  sample.small_squares /= counted;
  sample.small_batch /= counted;
  if (!(sample.small_batch < sample.big_batch)) return std::nullopt;  // nothing to compare
  return sample;
}

void AllReduceEngine::update(Replica& rep, int r, bool& skipped) {
  // On the reduced gradients, identical on every replica (or agreed between
  // the shards): all skip, and clip, together.
  const double clip = options_.optimizer.global_clip_norm;
  if (rep.sharded) {
    const ShardedOptimizer::Outcome outcome = rep.sharded->update(rep.scaler.get(), clip);
    if (r == 0) {
      skipped = !outcome.finite;
      if (clip > 0.0 && outcome.finite) gradient_norm_ = outcome.gradient_norm;
    }
    return;
  }
  const auto clip_and_step = [&] {
    if (clip > 0.0) {
      const double norm = optim::clip_grad_norm(rep.optimizer->parameters(), clip);
      if (r == 0) gradient_norm_ = norm;
    }
    rep.optimizer->step();
  };
  if (rep.scaler) {
    const bool finite = rep.scaler->unscale_and_check(rep.optimizer->parameters());
    if (finite) clip_and_step();
    rep.scaler->update(finite);
    if (r == 0) skipped = !finite;
  } else {
    clip_and_step();
  }
}

void AllReduceEngine::average_replicas(int r) {
  comm::Communicator& comm = *strategy().communicator(r);
  for (Variable& p : replicas_[r].model->parameters()) {
    comm.all_reduce(p.value(), comm::ReduceOp::mean);
    p.mark_modified();
  }
  if (options_.average_optimizer_state) average_optimizer_state(r);
}

void AllReduceEngine::average_optimizer_state(int r) {
  comm::Communicator& comm = *strategy().communicator(r);
  for (const auto& [name, t] : replicas_[r].optimizer->state()) {
    if (t->dtype() == DType::f32) comm.all_reduce(*t, comm::ReduceOp::mean);
  }
}

void AllReduceEngine::synchronize_for_saving() {
  synchronize();
  // Local SGD without averaged optimizer state: each replica has its own,
  // and a checkpoint holds one. Their mean, which every replica continues
  // from here as a resumed run's replicas do (each took replica 0's).
  if (local_sgd() && !options_.average_optimizer_state && strategy().global_replicas() > 1)
    strategy().run([&](int r) { average_optimizer_state(r); });
}

StepResult AllReduceEngine::synchronize() {
  if (strategy().global_replicas() == 1) return {};
  strategy().run([&](int r) {
    if (local_sgd()) average_replicas(r);
    // Buffers (batch norm's running statistics, unless synchronised) follow
    // each replica's own rows: replica 0's, the ones a checkpoint keeps, go
    // to every replica, so that an evaluation describes the saved model
    // and a resumed run's replicas agree as the uninterrupted run's did
    // (PyTorch DDP broadcasts rank 0's buffers likewise).
    comm::Communicator& comm = *strategy().communicator(r);
    for (auto& [name, t] : replicas_[r].model->named_buffers()) comm.broadcast(*t, 0);
  });
  return {};
}

void AllReduceEngine::exchange_records(int local_replica) {
  Replica& rep = replicas_[local_replica];
  const Replica::Moments& m = rep.moments;
  const double mine[kRecordFields] = {seconds(m.forward),
                                      seconds(m.backward_done - m.start - m.forward),
                                      seconds(m.reduced - m.backward_done),
                                      seconds(m.done - m.reduced),
                                      rep.loss_sum,
                                      rep.last_exchange};
  const auto start = Clock::now();
  // Bit for bit (agreement.h): the step loss adds the loss sums in global
  // replica order on every process alike.
  rep.peer_records = gather_in_group(*strategy().communicator(local_replica), mine);
  rep.last_exchange = seconds(Clock::now() - start);
}

std::vector<ReplicaStepTime> AllReduceEngine::local_breakdown(Clock::time_point start,
                                                              Clock::time_point end) const {
  // The last local backward: waiting before it is idling for a slower
  // replica; waiting after it is communication no backward hid.
  Clock::time_point last_backward = replicas_.front().moments.backward_done;
  for (const Replica& r : replicas_)
    last_backward = std::max(last_backward, r.moments.backward_done);
  std::vector<ReplicaStepTime> out;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    const Replica::Moments& m = replicas_[i].moments;
    const Clock::time_point idle_until =
        std::min(std::max(last_backward, m.backward_done), m.reduced);
    ReplicaStepTime t;
    t.replica = strategy().global_replica(static_cast<int>(i));
    t.forward = std::chrono::duration<double>(m.forward).count();
    t.backward = std::max(0.0, seconds_between(m.start, m.backward_done) - t.forward);
    t.communication = seconds_between(idle_until, m.reduced);
    t.optimizer = seconds_between(m.reduced, m.done);
    t.idle = seconds_between(start, m.start) + seconds_between(m.backward_done, idle_until) +
             seconds_between(m.done, end);
    out.push_back(t);
  }
  return out;
}

std::vector<ReplicaStepTime> AllReduceEngine::global_breakdown(Clock::duration span) const {
  // The slowest replica waits only for the exposed part of the all-reduce;
  // every other replica's longer wait is idling for it. The same holds for
  // the record exchange, a collective of its own (its cost as measured in
  // the previous step: it is steady, and the exchange cannot carry its own
  // duration). Counting only the all-reduce left a slow link's latency of
  // the exchange as idle: 40% of a step of a model with no computation
  // across two hosts at 100 Mbit/s (docs/multi_host.md).
  const std::vector<double>& t = replicas_.front().peer_records;
  const int n = strategy().global_replicas();
  double exposed = t[2], exchange = t[5];
  for (int g = 1; g < n; ++g) {
    exposed = std::min(exposed, t[kRecordFields * g + 2]);
    exchange = std::min(exchange, t[kRecordFields * g + 5]);
  }
  exposed += exchange;
  const double total = std::chrono::duration<double>(span).count();
  std::vector<ReplicaStepTime> out;
  for (int g = 0; g < n; ++g) {
    ReplicaStepTime x;
    x.replica = g;
    x.forward = t[kRecordFields * g];
    x.backward = t[kRecordFields * g + 1];
    x.communication = exposed;
    x.optimizer = t[kRecordFields * g + 3];
    x.idle = std::max(0.0, total - x.forward - x.backward - x.communication - x.optimizer);
    out.push_back(x);
  }
  return out;
}

void AllReduceEngine::evaluate(const data::Element& batch, const EvaluateFn& fn) {
  detail::evaluate_on_replicas(
      strategy(), [&](int r) -> nn::Module& { return *replicas_[r].model; }, batch, fn);
}

EngineState AllReduceEngine::save_state() {
  synchronize_for_saving();  // local SGD: the replicas' mean is the state
  EngineState state;
  Replica& first = replicas_.front();
  save_model_state(*first.model, state);
  if (first.sharded) {
    // Every replica takes part in gathering the shards (collective); the
    // chief's first replica keeps the whole state.
    std::vector<std::vector<std::pair<std::string, Tensor>>> gathered(replicas_.size());
    const bool chief = strategy().is_chief();
    strategy().run(
        [&](int r) { gathered[r] = replicas_[r].sharded->gather_state(chief && r == 0); });
    for (auto& [name, t] : gathered.front()) state.tensors.emplace_back("optimizer." + name, t);
  } else {
    for (const auto& [name, t] : first.optimizer->state())
      state.tensors.emplace_back("optimizer." + name, *t);
  }
  detail::save_scaler_state(first.scaler.get(), state);
  return state;
}

void AllReduceEngine::save_state(StateWriter& writer) {
  Replica& first = replicas_.front();
  if (!first.sharded) {
    write_state(save_state(), writer);
    return;
  }
  synchronize_for_saving();  // local SGD: the replicas' mean is the state
  // The model and the scaler (resident anyway), then the optimizer state
  // as its buckets are gathered: the chief's first replica hands each
  // bucket's slot to the writer and drops it before the next.
  EngineState resident;
  save_model_state(*first.model, resident);
  detail::save_scaler_state(first.scaler.get(), resident);
  std::vector<TensorLayout> layout = layout_of(resident);
  for (TensorLayout l : first.sharded->state_layout()) {
    l.name = "optimizer." + l.name;
    layout.push_back(std::move(l));
  }
  writer.begin(resident.metadata, layout);
  for (const auto& [name, t] : resident.tensors) writer.put(name, t);
  const bool chief = strategy().is_chief();
  strategy().run([&](int r) {
    ShardedOptimizer::StateSink sink;
    if (chief && r == 0)
      sink = [&](const std::string& name, const Tensor& t) { writer.put("optimizer." + name, t); };
    replicas_[r].sharded->gather_state(sink);
  });
}

void AllReduceEngine::load_state(const EngineState& state) {
  // Everything is checked before anything changes (the replicas are alike:
  // the first one's checks are every one's), so a bad checkpoint leaves the
  // engine as it was.
  const Replica& first = replicas_.front();
  check_model_state(state, *first.model);
  if (first.sharded) {
    first.sharded->check_state(state, "optimizer.");
  } else {
    for (const auto& [name, t] : first.optimizer->state())
      state.check_loads_into("optimizer." + name, *t);
  }
  for (Replica& r : replicas_) detail::load_scaler_state(state, r.scaler.get());
  // Every replica takes the same state: it loads into any replica count.
  for (Replica& r : replicas_) {
    load_model_state(state, *r.model);
    if (r.sharded) {
      r.sharded->load_state(state, "optimizer.");
    } else {
      for (auto& [name, t] : r.optimizer->state()) state.load_into("optimizer." + name, *t);
    }
  }
}

}  // namespace

std::unique_ptr<Engine> make_all_reduce_engine(Strategy& strategy, const ModelBuilder& build,
                                               const EngineOptions& options) {
  return std::make_unique<AllReduceEngine>(strategy, build, options);
}

}  // namespace tandem::distribute
