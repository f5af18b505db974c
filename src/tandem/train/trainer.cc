#include "tandem/train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/random.h"
#include "tandem/base/trace.h"
#include "tandem/data/batching.h"
#include "tandem/kernels/loss.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/evaluation.h"
#include "tandem/train/detail/batch_pipeline.h"
#include "tandem/train/detail/epoch_json.h"

namespace tandem::train {

// Where the run stands: the next step to run and the sums of the epoch so far.
struct Trainer::Progress {
  int64_t epoch = 0;      // 0-based epoch in progress
  int64_t step = 0;       // next step inside it
  double loss_sum = 0.0;  // sum over examples of the per-example loss
  int64_t correct = 0;
  int64_t seen = 0;
  double train_seconds = 0.0;
};

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kCheckpointFile = "checkpoint.tckpt";

void check_data(const data::LabeledImages& d, const char* what) {
  if (!d.images.defined() || !d.labels.defined() || d.images.rank() < 2 ||
      d.labels.dtype() != DType::i32 || d.labels.rank() != 1 ||
      d.images.dim(0) != d.labels.dim(0)) {
    TANDEM_THROW(InvalidArgument, what, " data must be images (N, ...) with i32 labels (N,), got ",
                 d.images.to_string(), " and ", d.labels.to_string());
  }
}

std::string number(double value) {
  return fmt::format("{}", value);
}

int64_t to_steps(double epochs, int64_t steps_per_epoch) {
  return static_cast<int64_t>(std::llround(epochs * static_cast<double>(steps_per_epoch)));
}

// The rows [begin, end) of a global batch of `count` examples that global
// replica g of n trains on: consecutive, sizes as even as possible.
std::pair<int64_t, int64_t> replica_rows(int64_t count, int g, int n) {
  const int64_t base = count / n, extra = count % n;
  const int64_t begin = g * base + std::min<int64_t>(g, extra);
  return {begin, begin + base + (g < extra ? 1 : 0)};
}

}  // namespace

Trainer::Trainer(TrainConfig config, std::shared_ptr<nn::Module> model,
                 data::LabeledImages train_data, data::LabeledImages test_data)
    : Trainer(
          std::move(config),
          [model, used = std::make_shared<bool>(false)]() {
            if (!model) TANDEM_THROW(InvalidArgument, "Trainer needs a model");
            if (*used) {
              TANDEM_THROW(InvalidArgument,
                           "a Trainer given one model runs one replica; "
                           "pass a model factory to replicate it");
            }
            *used = true;
            return model;
          },
          std::move(train_data), std::move(test_data)) {}

Trainer::Trainer(TrainConfig config, const ModelFactory& factory, data::LabeledImages train_data,
                 data::LabeledImages test_data)
    : config_(std::move(config)), train_(std::move(train_data)), test_(std::move(test_data)) {
  if (!factory) TANDEM_THROW(InvalidArgument, "Trainer needs a model factory");
  check_data(train_, "training");
  if (test_.size() > 0) check_data(test_, "test");
  if (config_.epochs < 1)
    TANDEM_THROW(InvalidArgument, "epochs must be at least 1, got ", config_.epochs);
  if (config_.batch_size < 1) {
    TANDEM_THROW(InvalidArgument, "batch size must be at least 1, got ", config_.batch_size);
  }
  if (config_.batch_size > train_.size()) {
    TANDEM_THROW(InvalidArgument, "batch size ", config_.batch_size,
                 " is larger than the training set (", train_.size(), " examples)");
  }
  if (config_.prefetch_batches < 0 && config_.prefetch_batches != data::kAutotune) {
    TANDEM_THROW(InvalidArgument, "prefetch depth must be 0 or more batches (or autotune), got ",
                 config_.prefetch_batches);
  }
  if (config_.input_parallel_calls < 1 && config_.input_parallel_calls != data::kAutotune) {
    TANDEM_THROW(InvalidArgument,
                 "input parallel calls must be at least 1 (or autotune), got ",
                 config_.input_parallel_calls);
  }
  if (config_.eval_batch_size < 1) {
    TANDEM_THROW(InvalidArgument, "evaluation batch size must be at least 1, got ",
                 config_.eval_batch_size);
  }
  if (config_.warmup_epochs < 0.0) {
    TANDEM_THROW(InvalidArgument, "warm-up epochs must be >= 0, got ", config_.warmup_epochs);
  }
  if (config_.resume && config_.output_dir.empty()) {
    TANDEM_THROW(InvalidArgument, "resume needs the output directory that holds the checkpoint");
  }
  strategy_ = distribute::make_strategy(config_.strategy);
  if (config_.batch_size < strategy_->global_replicas()) {
    TANDEM_THROW(InvalidArgument, "global batch ", config_.batch_size,
                 " has fewer examples than the ", strategy_->global_replicas(), " replicas");
  }
  if (config_.batch_size % strategy_->global_replicas() != 0) {
    TANDEM_THROW(InvalidArgument, "global batch ", config_.batch_size, " does not divide among ",
                 strategy_->global_replicas(),
                 " replicas (each replica takes global / replicas examples; "
                 "only an epoch's last, partial batch is split unevenly)");
  }
  const int64_t per_epoch = steps_per_epoch();
  schedule_ = optim::make_schedule(
      {.name = config_.schedule,
       .base_lr = config_.optimizer.learning_rate,
       .step_size = std::max<int64_t>(1, to_steps(config_.lr_step_epochs, per_epoch)),
       .gamma = config_.lr_gamma,
       .total_steps = per_epoch * config_.epochs,
       .min_lr = config_.min_lr,
       .warmup_steps = to_steps(config_.warmup_epochs, per_epoch)});
  build_replicas(factory);
}

Trainer::~Trainer() {
  // Reducers hold hooks on the replicas' parameters and work on their communicators.
  for (Replica& r : replicas_) r.reducer.reset();
}

void Trainer::build_replicas(const ModelFactory& factory) {
  const int local = strategy_->local_replicas();
  for (int r = 0; r < local; ++r) {
    // Each replica's parameters and state live on its device.
    DeviceScope device(strategy_->device(r));
    Replica replica;
    replica.model = factory();
    if (!replica.model) TANDEM_THROW(InvalidArgument, "the model factory returned no model");
    replica.optimizer = optim::make_optimizer(config_.optimizer, replica.model->parameters());
    std::optional<precision::LossScalerOptions> scaling = config_.loss_scale;
    if (!scaling && config_.policy == precision::Policy::mixed_float16)
      scaling = precision::LossScalerOptions{};
    if (scaling) replica.scaler = std::make_unique<precision::LossScaler>(*scaling);
    replicas_.push_back(std::move(replica));
  }
  if (strategy_->global_replicas() > 1) {
    check_and_broadcast_weights();
    for (int r = 0; r < local; ++r) {
      DeviceScope device(strategy_->device(r));
      replicas_[r].reducer = std::make_unique<distribute::Reducer>(
          replicas_[r].model->parameters(), *strategy_->communicator(r), config_.reducer);
    }
  }
}

void Trainer::check_and_broadcast_weights() {
  strategy_->run([&](int r) {
    comm::Communicator& comm = *strategy_->communicator(r);
    // Every replica must hold the same architecture: compare a signature of
    // the parameter count and shapes (max and -min over all replicas).
    int64_t signature = 0, count = 0;
    for (const auto& [name, p] : replicas_[r].model->named_parameters()) {
      ++count;
      for (int64_t d : p.shape().dims()) signature = signature * 31 + d + 7;
      signature %= 1000000007;
    }
    Tensor check = Tensor::empty(Shape{4}, DType::i32);
    int32_t* c = check.data<int32_t>();
    c[0] = static_cast<int32_t>(signature);
    c[1] = -static_cast<int32_t>(signature);
    c[2] = static_cast<int32_t>(count);
    c[3] = -static_cast<int32_t>(count);
    comm.all_reduce(check, comm::ReduceOp::max);
    if (c[0] != -c[1] || c[2] != -c[3]) {
      TANDEM_THROW(InvalidArgument,
                   "replicas were built with different models (parameter count or shapes differ "
                   "between replicas or workers)");
    }
    // Initial weights and buffers from global replica 0.
    for (auto& [name, p] : replicas_[r].model->named_parameters()) {
      comm.broadcast(p.value(), 0);
      p.mark_modified();
    }
    for (auto& [name, t] : replicas_[r].model->named_buffers()) comm.broadcast(*t, 0);
  });
}

std::vector<double> Trainer::sum_over_replicas(
    const std::vector<std::vector<double>>& per_replica) {
  const size_t n = per_replica.front().size();
  if (strategy_->global_replicas() == 1) return per_replica.front();
  std::vector<double> total(n, 0.0);
  std::mutex mutex;
  strategy_->run([&](int r) {
    // Sums travel as f32 pairs (value rounded, remainder) to keep double precision.
    Tensor t = Tensor::empty(Shape{static_cast<int64_t>(2 * n)});
    for (size_t i = 0; i < n; ++i) {
      const auto hi = static_cast<float>(per_replica[r][i]);
      t.data<float>()[2 * i] = hi;
      t.data<float>()[2 * i + 1] = static_cast<float>(per_replica[r][i] - hi);
    }
    strategy_->communicator(r)->all_reduce(t, comm::ReduceOp::sum);
    if (r == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      for (size_t i = 0; i < n; ++i) {
        total[i] = static_cast<double>(t.data<float>()[2 * i]) +
                   static_cast<double>(t.data<float>()[2 * i + 1]);
      }
    }
  });
  return total;
}

int64_t Trainer::steps_per_epoch() const {
  const int64_t n = train_.size();
  return config_.drop_remainder ? n / config_.batch_size
                                : (n + config_.batch_size - 1) / config_.batch_size;
}

std::string Trainer::checkpoint_path() const {
  return config_.output_dir.empty()
             ? std::string()
             : (std::filesystem::path(config_.output_dir) / kCheckpointFile).string();
}

std::vector<ReplicaStepTime> Trainer::replica_breakdown(Clock::time_point input_done,
                                                        Clock::time_point step_end) const {
  const auto seconds = [](Clock::duration d) {
    return std::max(0.0, std::chrono::duration<double>(d).count());
  };
  // The last local backward: waiting before it is idling for a slower
  // replica; waiting after it is communication no backward hid.
  Clock::time_point last_backward = replicas_.front().moments.backward_done;
  for (const Replica& r : replicas_)
    last_backward = std::max(last_backward, r.moments.backward_done);
  std::vector<ReplicaStepTime> out;
  for (const Replica& r : replicas_) {
    const Replica::Moments& m = r.moments;
    const Clock::time_point idle_until =
        std::min(std::max(last_backward, m.backward_done), m.reduced);
    ReplicaStepTime t;
    t.replica = strategy_->global_replica(static_cast<int>(&r - replicas_.data()));
    t.forward = seconds(m.forward_done - m.start);
    t.backward = seconds(m.backward_done - m.forward_done);
    t.communication = seconds(m.reduced - idle_until);
    t.optimizer = seconds(m.done - m.reduced);
    t.idle = seconds(m.start - input_done) + seconds(idle_until - m.backward_done) +
             seconds(step_end - m.done);
    out.push_back(t);
  }
  return out;
}

void Trainer::exchange_replica_times(int local_replica) {
  // Other processes' replicas run on their own clocks, so their moments
  // cannot be compared with ours; their durations can. Each replica shares
  // (forward, backward, wait for gradients, optimizer) with all the others.
  Replica& rep = replicas_[local_replica];
  const Replica::Moments& m = rep.moments;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<float>(d).count(); };
  const float mine[4] = {seconds(m.forward_done - m.start),
                         seconds(m.backward_done - m.forward_done),
                         seconds(m.reduced - m.backward_done), seconds(m.done - m.reduced)};
  if (!rep.peer_times.defined())
    rep.peer_times = Tensor::empty(Shape{4 * strategy_->global_replicas()});
  strategy_->communicator(local_replica)
      ->all_gather(Tensor::from_floats(Shape{4}, mine), rep.peer_times);
}

std::vector<ReplicaStepTime> Trainer::global_breakdown(Clock::duration after_input) const {
  // The slowest replica waits only for the exposed part of the all-reduce;
  // every other replica's longer wait is idling for it.
  const float* t = replicas_.front().peer_times.data<float>();
  const int n = strategy_->global_replicas();
  double exposed = t[2];
  for (int g = 1; g < n; ++g) exposed = std::min(exposed, static_cast<double>(t[4 * g + 2]));
  const double span = std::chrono::duration<double>(after_input).count();
  std::vector<ReplicaStepTime> out;
  for (int g = 0; g < n; ++g) {
    ReplicaStepTime x;
    x.replica = g;
    x.forward = t[4 * g];
    x.backward = t[4 * g + 1];
    x.communication = exposed;
    x.optimizer = t[4 * g + 3];
    x.idle = std::max(0.0, span - x.forward - x.backward - x.communication - x.optimizer);
    out.push_back(x);
  }
  return out;
}

EvalResult Trainer::evaluate(const data::LabeledImages& data) {
  EvalResult result;
  if (data.size() == 0) return result;
  check_data(data, "evaluation");
  const int n = strategy_->global_replicas();
  std::vector<std::vector<double>> sums(replicas_.size(), std::vector<double>(2, 0.0));
  strategy_->run([&](int r) {
    // Each replica evaluates its own contiguous part of the data.
    const auto [first, last] = replica_rows(data.size(), strategy_->global_replica(r), n);
    const EvalSums s =
        evaluate_rows(*replicas_[r].model, data, first, last, config_.eval_batch_size);
    sums[r] = {s.loss, static_cast<double>(s.correct)};
  });
  const std::vector<double> total = sum_over_replicas(sums);
  result.examples = data.size();
  result.loss = total[0] / static_cast<double>(data.size());
  result.accuracy = total[1] / static_cast<double>(data.size());
  return result;
}

TrainResult Trainer::fit(const TrainCallbacks& callbacks) {
  const auto run_start = Clock::now();
  TrainResult result;
  Progress progress;
  if (config_.resume) {
    restore(progress, result.history);
    result.resumed_from_step = progress.epoch * steps_per_epoch() + progress.step;
  } else if (strategy_->is_chief() && !config_.output_dir.empty() &&
             std::filesystem::exists(checkpoint_path())) {
    TANDEM_THROW(InvalidArgument, "'", checkpoint_path(),
                 "' already exists: resume it or choose "
                 "another output directory rather than overwrite it");
  }
  if (!config_.output_dir.empty() && strategy_->is_chief()) {
    std::error_code error;
    std::filesystem::create_directories(config_.output_dir, error);
    if (error) {
      TANDEM_THROW(IoError, "cannot create output directory '", config_.output_dir,
                   "': ", error.message());
    }
  }
  stop_requested_.store(false);
  for (Replica& r : replicas_) r.model->train();
  // With replica threads on every core, the main thread must not start
  // OpenMP teams: their workers spin after each region and steal a replica's core.
  NumThreadsScope main_threads(strategy_->local_replicas() > 1 ? 1 : num_threads());
  const int n_global = strategy_->global_replicas();
  // With several processes, replicas share their step timings (a tiny
  // all-gather after the update) so that every process sees every replica.
  const bool exchange_times = n_global > strategy_->local_replicas();
  // Track names for traces: the input is assembled on this thread.
  const std::thread::id main_thread = std::this_thread::get_id();
  trace::set_thread_name("input (main thread)");
  strategy_->run([&](int r) {
    // One device runs its replica on this thread, which also assembles input.
    trace::set_thread_name(
        "replica " + std::to_string(strategy_->global_replica(r)) +
        (std::this_thread::get_id() == main_thread ? " + input (main thread)" : ""));
  });
  const int64_t n = train_.size();
  const int64_t per_epoch = steps_per_epoch();
  // Per local replica: loss sum and correct count of the epoch so far.
  std::vector<std::vector<double>> partial(replicas_.size(), std::vector<double>(2, 0.0));
  // This process's rows of a step's global batch (all of them unless
  // multi-worker), gathered and transformed: a pure function of (epoch, step).
  // The epoch's permutation is shared by the threads building batches; two
  // epochs are needed at once where parallel builds straddle their boundary.
  std::mutex order_mutex;
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> orders;
  const auto epoch_order = [&](int64_t epoch) {
    std::lock_guard<std::mutex> lock(order_mutex);
    auto& order = orders[epoch];
    if (!order) {
      order = std::make_shared<const std::vector<int64_t>>(
          data::epoch_permutation(n, config_.seed, epoch));
      while (orders.begin()->first < epoch - 1) orders.erase(orders.begin());
    }
    return order;
  };
  const auto make_batch = [&](int64_t epoch, int64_t step) {
    trace::Span span("input", "step");
    const std::shared_ptr<const std::vector<int64_t>> order = epoch_order(epoch);
    const int64_t begin = step * config_.batch_size;
    const int64_t count = std::min(n, begin + config_.batch_size) - begin;
    const int64_t local_begin = replica_rows(count, strategy_->first_replica(), n_global).first;
    const int64_t local_end =
        replica_rows(count, strategy_->first_replica() + strategy_->local_replicas() - 1, n_global)
            .second;
    const std::span<const int64_t> rows(order->data() + begin + local_begin,
                                        static_cast<size_t>(local_end - local_begin));
    detail::Batch b{data::gather_rows(train_.images, rows), data::gather_rows(train_.labels, rows),
                    count, local_begin};
    if (config_.batch_transform) {
      MemoryCategoryScope input_memory(MemoryCategory::input);
      // A transform drawing from thread_generator() sees the same numbers
      // whichever thread builds the batch and whenever (prefetch, resume).
      thread_generator().set_state(
          mix_seed(config_.seed ^ 0xB47Cull, static_cast<uint64_t>(epoch * per_epoch + step)), 0);
      config_.batch_transform(b.images, b.labels);
      if (b.images.dim(0) != static_cast<int64_t>(rows.size()) ||
          b.labels.dim(0) != static_cast<int64_t>(rows.size())) {
        TANDEM_THROW(InvalidArgument, "batch_transform changed the batch from ", rows.size(),
                     " rows to ", b.images.dim(0), " images and ", b.labels.dim(0), " labels");
      }
    }
    return b;
  };
  std::unique_ptr<detail::BatchPipeline> pipeline;
  if (config_.prefetch_batches != 0 || config_.input_parallel_calls != 1) {
    pipeline = std::make_unique<detail::BatchPipeline>(
        make_batch, config_.input_parallel_calls, config_.prefetch_batches, progress.epoch,
        progress.step, per_epoch, config_.epochs);
  }
  for (; progress.epoch < config_.epochs; ++progress.epoch) {
    double lr = replicas_.front().optimizer->learning_rate();
    for (; progress.step < per_epoch; ++progress.step) {
      if (should_stop()) {
        const std::vector<double> so_far = sum_over_replicas(partial);
        progress.loss_sum += so_far[0];
        progress.correct += static_cast<int64_t>(std::llround(so_far[1]));
        save(progress, result.history);
        result.interrupted = true;
        result.wall_seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
        return result;
      }
      const auto step_start = Clock::now();
      detail::Batch batch;
      if (pipeline) {
        trace::Span span("wait for input", "step");
        batch = pipeline->next();
      } else {
        batch = make_batch(progress.epoch, progress.step);
      }
      const Tensor& x = batch.images;
      const Tensor& y = batch.labels;
      const int64_t count = batch.global_count;
      const int64_t local_begin = batch.first_row;
      const auto input_done = Clock::now();
      const double input_seconds = std::chrono::duration<double>(input_done - step_start).count();
      const int64_t global_step = progress.epoch * per_epoch + progress.step;
      lr = schedule_->lr(global_step);
      std::vector<double> step_loss(replicas_.size(), 0.0);
      bool skipped_this_step = false;
      strategy_->run([&](int r) {
        Replica& rep = replicas_[r];
        rep.moments.start = Clock::now();
        const int g = strategy_->global_replica(r);
        const auto [first, last] = replica_rows(count, g, n_global);
        rep.optimizer->set_learning_rate(lr);
        const uint64_t stream =
            static_cast<uint64_t>(global_step) * static_cast<uint64_t>(n_global) + g;
        thread_generator().set_state(mix_seed(config_.seed ^ 0xD50Dull, stream), 0);
        rep.optimizer->zero_grad();
        if (rep.reducer) rep.reducer->prepare();
        // A replica with no examples (an epoch's last, short batch) still runs
        // its empty batch: cross-replica layers need every replica's part.
        Variable loss;
        {
          trace::Span span("forward", "step");
          const Variable logits = rep.model->forward(
              Variable(x.slice(first - local_begin, last - local_begin).to(current_device())));
          const Tensor labels = y.slice(first - local_begin, last - local_begin);
          // Normalised by the global batch: the replicas' gradients sum to the batch mean.
          loss = softmax_cross_entropy(logits, labels, static_cast<double>(count));
          step_loss[r] = loss.value().item();
          partial[r][1] += static_cast<double>(kernels::count_correct(logits.value(), labels));
        }
        rep.moments.forward_done = Clock::now();
        {
          trace::Span span("backward", "step");
          (rep.scaler ? rep.scaler->scale_loss(loss) : loss).backward();
        }
        rep.moments.backward_done = Clock::now();
        if (rep.reducer) {
          trace::Span span("wait for gradients", "step");
          rep.reducer->finish();
        }
        rep.moments.reduced = Clock::now();
        trace::Span optimizer_span("optimizer", "step");
        if (rep.scaler) {
          // On the reduced gradients, identical on every replica: all skip together.
          const bool finite = rep.scaler->unscale_and_check(rep.optimizer->parameters());
          if (finite) rep.optimizer->step();
          rep.scaler->update(finite);
          if (r == 0) skipped_this_step = !finite;
        } else {
          rep.optimizer->step();
        }
        if (std::isfinite(step_loss[r])) partial[r][0] += step_loss[r] * static_cast<double>(count);
        rep.moments.done = Clock::now();
        if (exchange_times) exchange_replica_times(r);
      });
      double loss_value = 0.0;
      for (double l : step_loss) loss_value += l;  // this worker's share of the global mean
      const precision::LossScaler* scaler = replicas_.front().scaler.get();
      if (!std::isfinite(loss_value) && scaler == nullptr) {
        TANDEM_THROW(Error, "training diverged: loss is ", loss_value, " at epoch ",
                     progress.epoch + 1, " step ", progress.step + 1, " (lower the learning rate)");
      }
      progress.seen += count;
      const auto step_end = Clock::now();
      const double step_seconds = std::chrono::duration<double>(step_end - step_start).count();
      progress.train_seconds += step_seconds;
      if (callbacks.on_step) {
        std::vector<ReplicaStepTime> breakdown = exchange_times
                                                     ? global_breakdown(step_end - input_done)
                                                     : replica_breakdown(input_done, step_end);
        double idle = 0.0, communication = 0.0;
        for (const ReplicaStepTime& t : breakdown) idle += t.idle, communication += t.communication;
        const auto local = static_cast<double>(breakdown.size());
        callbacks.on_step({.epoch = progress.epoch + 1,
                           .step = progress.step + 1,
                           .steps_per_epoch = per_epoch,
                           .global_step = global_step + 1,
                           .loss = loss_value,
                           .learning_rate = lr,
                           .batch_examples = count,
                           .input_seconds = input_seconds,
                           .step_seconds = step_seconds,
                           .exposed_communication_seconds = communication / local,
                           .idle_seconds = idle / local,
                           .replicas = std::move(breakdown),
                           .buckets = replicas_.front().reducer
                                          ? replicas_.front().reducer->last_step().buckets
                                          : std::vector<distribute::ReducerStats::Bucket>{},
                           .loss_scale = scaler ? scaler->scale() : 1.0,
                           .skipped = skipped_this_step});
      }
    }
    // The epoch's sums over every replica and worker.
    const std::vector<double> epoch_sums = sum_over_replicas(partial);
    progress.loss_sum += epoch_sums[0];
    progress.correct += static_cast<int64_t>(std::llround(epoch_sums[1]));
    for (auto& p : partial) std::fill(p.begin(), p.end(), 0.0);
    EpochResult epoch;
    epoch.epoch = progress.epoch + 1;
    epoch.train_loss = progress.loss_sum / static_cast<double>(std::max<int64_t>(progress.seen, 1));
    epoch.train_accuracy = static_cast<double>(progress.correct) /
                           static_cast<double>(std::max<int64_t>(progress.seen, 1));
    epoch.train_seconds = progress.train_seconds;
    epoch.examples_per_second = progress.seen / std::max(progress.train_seconds, 1e-9);
    epoch.learning_rate = lr;
    if (pipeline) epoch.input_stages = pipeline->dataset().stats();
    if (const precision::LossScaler* scaler = replicas_.front().scaler.get()) {
      epoch.loss_scale = scaler->scale();
      epoch.skipped_steps = scaler->skipped_steps();
      epoch.steps_since_overflow = scaler->steps_since_overflow();
    }
    const EvalResult test = evaluate(test_);
    epoch.test_loss = test.loss;
    epoch.test_accuracy = test.accuracy;
    result.history.push_back(epoch);
    progress = Progress{.epoch = progress.epoch, .step = 0};
    if (!config_.output_dir.empty()) {
      Progress next = progress;
      ++next.epoch;
      save(next, result.history);
    }
    if (callbacks.on_epoch) callbacks.on_epoch(epoch);
  }
  result.wall_seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
  return result;
}

bool Trainer::should_stop() {
  bool stop = stop_requested_.load();
  if (strategy_->global_replicas() == strategy_->local_replicas()) return stop;
  // Across processes every worker must stop at the same step: agree on it.
  std::atomic<bool> any{false};
  strategy_->run([&](int r) {
    Tensor flag = Tensor::full(Shape{1}, stop ? 1.0f : 0.0f);
    strategy_->communicator(r)->all_reduce(flag, comm::ReduceOp::max);
    if (flag.data<float>()[0] > 0.0f) any.store(true);
  });
  return any.load();
}

void Trainer::save(const Progress& progress, const std::vector<EpochResult>& history) {
  if (config_.output_dir.empty() || !strategy_->is_chief()) return;
  Checkpoint c;
  c.metadata = {{"format", kTrainerCheckpointFormat},
                {"model", config_.model},
                {"precision", std::string(precision::policy_name(config_.policy))},
                {"compute_dtype", std::string(dtype_name(config_.compute_dtype))},
                {"batch_size", std::to_string(config_.batch_size)},
                {"seed", std::to_string(config_.seed)},
                {"train_examples", std::to_string(train_.size())},
                {"drop_remainder", config_.drop_remainder ? "true" : "false"},
                {"optimizer", optimizer().name()},
                {"epoch", std::to_string(progress.epoch)},
                {"step", std::to_string(progress.step)},
                {"loss_sum", number(progress.loss_sum)},
                {"correct", std::to_string(progress.correct)},
                {"seen", std::to_string(progress.seen)},
                {"train_seconds", number(progress.train_seconds)}};
  c.metadata["history"] = nlohmann::json(history).dump();
  if (const precision::LossScaler* scaler = replicas_.front().scaler.get()) {
    c.metadata["loss_scale"] = number(scaler->scale());
    c.metadata["loss_scale_skipped"] = std::to_string(scaler->skipped_steps());
    c.metadata["loss_scale_good_steps"] = std::to_string(scaler->steps_since_overflow());
  }
  for (const auto& [name, p] : model().named_parameters())
    c.tensors.emplace_back("model." + name, p.value());
  for (const auto& [name, t] : model().named_buffers())
    c.tensors.emplace_back("buffer." + name, *t);
  for (const auto& [name, t] : optimizer().state()) c.tensors.emplace_back("optimizer." + name, *t);
  save_checkpoint(checkpoint_path(), c);
}

void Trainer::restore(Progress& progress, std::vector<EpochResult>& history) {
  const std::string path = checkpoint_path();
  if (!std::filesystem::exists(path)) {
    TANDEM_THROW(InvalidArgument, "cannot resume: no checkpoint at '", path, "'");
  }
  // Loaded tensors are copied into the model and dropped: temporaries, not
  // activations (the monitor's memory findings read the activation peak).
  MemoryCategoryScope loading(MemoryCategory::workspace);
  const Checkpoint c = load_trainer_checkpoint(path);
  const std::pair<const char*, std::string> expected[] = {
      {"model", config_.model},
      {"batch_size", std::to_string(config_.batch_size)},
      {"seed", std::to_string(config_.seed)},
      {"train_examples", std::to_string(train_.size())},
      {"drop_remainder", config_.drop_remainder ? "true" : "false"},
      {"optimizer", optimizer().name()}};
  for (const auto& [key, value] : expected) {
    if (c.meta(key) != value) {
      TANDEM_THROW(InvalidArgument, "cannot resume '", path, "': it was written with ", key, " ",
                   c.meta(key), " but this run has ", value);
    }
  }
  // Every replica takes the same saved state: a checkpoint loads into any count.
  for (Replica& replica : replicas_) {
    load_model_state(c, *replica.model);
    if (replica.scaler && c.metadata.count("loss_scale")) {
      replica.scaler->restore(std::stod(c.meta("loss_scale")),
                              std::stoll(c.meta("loss_scale_skipped")),
                              std::stoll(c.meta("loss_scale_good_steps")));
    }
    for (auto& [name, t] : replica.optimizer->state()) c.load_into("optimizer." + name, *t);
  }
  progress.epoch = std::stoll(c.meta("epoch"));
  progress.step = std::stoll(c.meta("step"));
  progress.loss_sum = std::stod(c.meta("loss_sum"));
  progress.correct = std::stoll(c.meta("correct"));
  progress.seen = std::stoll(c.meta("seen"));
  progress.train_seconds = std::stod(c.meta("train_seconds"));
  history = nlohmann::json::parse(c.meta("history")).get<std::vector<EpochResult>>();
}

}  // namespace tandem::train
