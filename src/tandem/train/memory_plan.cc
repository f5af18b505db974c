#include "tandem/train/memory_plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "tandem/autograd/functions.h"
#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/comm/bucketer.h"
#include "tandem/comm/inprocess.h"
#include "tandem/distribute/reducer.h"
#include "tandem/distribute/replica_context.h"
#include "tandem/distribute/sharded_optimizer.h"
#include "tandem/nn/module.h"
#include "tandem/optim/optimizer.h"

namespace tandem::train {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kCategories = kMemoryCategoryCount;
int index(MemoryCategory c) {
  return static_cast<int>(c);
}

// Where the trace runs: a device no strategy uses, so that nothing else
// counts in its allocator.
Device scratch_device() {
  return cpu_device(4095);
}

// `rows` copies of one example, as a batch.
data::Element repeat_rows(const data::Element& example, int64_t rows) {
  data::Element batch;
  for (const auto& [name, t] : example.features()) {
    std::vector<int64_t> dims{rows};
    for (int64_t d : t.shape().dims()) dims.push_back(d);
    Tensor out = Tensor::empty(Shape(dims), t.dtype(), current_device(), MemoryCategory::input);
    const Tensor& row = t;  // tensors are contiguous
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(out.raw_data()) + r * row.nbytes(), row.raw_data(),
                  row.nbytes());
    batch.set(name, out);
  }
  return batch;
}

int64_t example_bytes(const data::Element& example, const std::string& only = "") {
  int64_t bytes = 0;
  for (const auto& [name, t] : example.features())
    if (only.empty() || name == only) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

// Bytes as fixed + per-row bytes.
struct Fit {
  double fixed = 0.0, per_row = 0.0;
  double at(int64_t rows) const { return fixed + per_row * static_cast<double>(rows); }
};

// Two points -> a line through them (the per-row part never negative).
Fit line(int64_t r1, double y1, int64_t r2, double y2) {
  if (r2 == r1) return {y1, 0.0};
  const double slope = std::max(0.0, (y2 - y1) / static_cast<double>(r2 - r1));
  return {std::max(0.0, y1 - slope * static_cast<double>(r1)), slope};
}

// What a traced step allocates beyond what it started with, per category
// and in all (the simultaneous peak), fitted over the rows.
struct StepFits {
  std::array<Fit, kCategories> category;
  Fit total;
};

struct Trace {
  // What stays allocated between steps once the first one ran (cached
  // casts of the weights), per category.
  std::array<double, kCategories> persistent{};
  StepFits train, eval;
  std::array<int64_t, 2> rows{};
};

// The rows traced: about a quarter and a half of the micro-batch (both at
// most 64, so that a big batch is not traced at full size); 1 and 2 for the
// smallest (two sizes always, or nothing would say how memory grows).
std::array<int64_t, 2> trace_rows(int64_t micro_batch) {
  if (micro_batch <= 4) return {1, 2};
  const int64_t r2 = std::clamp<int64_t>(micro_batch / 2, 2, 64);
  const int64_t r1 = std::max<int64_t>(1, r2 / 2);
  return {r1, r2};
}

Trace trace(const MemoryPlanInput& in, int64_t micro_batch, int64_t eval_rows) {
  const distribute::ReplicaContext context{.device = scratch_device(),
                                           .threads = in.layout.threads_per_replica};
  distribute::ReplicaScope scope(context);
  Allocator& allocator = allocator_for(scratch_device());
  const std::string& feature = in.config.input_feature;
  if (!in.example.has(feature)) {
    TANDEM_THROW(InvalidArgument, "memory plan: the example has no input feature '", feature, "'");
  }
  Trace out;
  {
    std::shared_ptr<nn::Module> model = in.model.build();
    const MemoryStats built = allocator.stats();
    // One step: forward, loss, backward (or, for evaluation, the forward
    // without gradients); what it allocated at its peak beyond what it
    // started with, per category, then in all.
    using Deltas = std::array<double, kCategories + 1>;
    const auto step = [&](int64_t rows, bool training) {
      const data::Element batch = repeat_rows(in.example, rows);
      allocator.reset_peaks();
      const MemoryStats before = allocator.stats();
      {
        model->train(training);
        std::optional<NoGradGuard> no_grad;
        if (!training) no_grad.emplace();
        const Variable outputs = model->forward(Variable(batch.at(feature)));
        const Variable loss = sum(in.config.loss.per_example(outputs, batch));
        if (training) scale(loss, static_cast<float>(1.0 / static_cast<double>(rows))).backward();
      }
      // As after an update: the next forward casts the weights again while
      // the old casts are still held.
      for (Variable& p : model->parameters()) {
        p.zero_grad();
        p.mark_modified();
      }
      const MemoryStats after = allocator.stats();
      Deltas d{};
      for (int c = 0; c < kCategories; ++c)
        d[c] = static_cast<double>(after.peak_bytes[c] - before.current_bytes[c]);
      d[kCategories] = static_cast<double>(after.peak_total_bytes - before.current_total_bytes);
      return d;
    };
    // A model that does not take the data fails here first: say where.
    const auto traced_step = [&](int64_t rows, bool training) {
      try {
        return step(rows, training);
      } catch (const Error& e) {
        // The tensors there name the trace's own device: the user's is cpu.
        std::string what = e.what();
        const std::string scratch = scratch_device().to_string();
        for (size_t at = what.find(scratch); at != std::string::npos; at = what.find(scratch, at))
          what.replace(at, scratch.size(), "cpu");
        TANDEM_THROW(InvalidArgument, "the model does not take the training data (",
                     training ? "a training step" : "an evaluation", " on ", rows,
                     " of its examples, traced for the memory plan): ", what);
      }
    };
    const auto fit = [&](const std::array<int64_t, 2>& rows, bool training) {
      const Deltas a = traced_step(rows[0], training), b = traced_step(rows[1], training);
      StepFits f;
      for (int c = 0; c < kCategories; ++c) f.category[c] = line(rows[0], a[c], rows[1], b[c]);
      f.total = line(rows[0], a[kCategories], rows[1], b[kCategories]);
      return f;
    };
    out.rows = trace_rows(micro_batch);
    traced_step(out.rows[0], true);  // warm-up: what persists between steps is allocated now
    const MemoryStats warm = allocator.stats();
    for (int c = 0; c < kCategories; ++c) {
      if (c == index(MemoryCategory::gradients)) continue;  // the engine's, not the trace's
      out.persistent[c] = static_cast<double>(warm.current_bytes[c] - built.current_bytes[c]);
    }
    out.train = fit(out.rows, true);
    // Evaluation forwards eval_rows at once; traced like training, scaled.
    if (in.evaluates) out.eval = fit(trace_rows(2 * eval_rows), false);
  }
  allocator.release_cache();
  return out;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

int64_t DeviceMemoryPlan::bytes(MemoryCategory category, int64_t micro_batch) const {
  const int c = index(category);
  return static_cast<int64_t>(
      std::llround(std::max(floor[c], fixed[c] + per_row[c] * static_cast<double>(micro_batch))));
}

int64_t DeviceMemoryPlan::total(int64_t micro_batch) const {
  const auto rows = static_cast<double>(micro_batch);
  return static_cast<int64_t>(
      std::llround(steady_fixed + steady_per_row * rows +
                   std::max(transient_floor, transient_fixed + transient_per_row * rows)));
}

MemoryCategory DeviceMemoryPlan::largest(int64_t micro_batch) const {
  int best = 0;
  for (int c = 1; c < kCategories; ++c) {
    if (bytes(static_cast<MemoryCategory>(c), micro_batch) >
        bytes(static_cast<MemoryCategory>(best), micro_batch))
      best = c;
  }
  return static_cast<MemoryCategory>(best);
}

const DeviceMemoryPlan& MemoryPlan::fullest(int64_t micro) const {
  TANDEM_CHECK(!devices.empty(), "a memory plan without devices");
  const DeviceMemoryPlan* best = &devices.front();
  for (const DeviceMemoryPlan& d : devices)
    if (d.total(micro) > best->total(micro)) best = &d;
  return *best;
}

int64_t MemoryPlan::largest_micro_batch(int64_t limit_bytes) const {
  if (peak(1) > limit_bytes) return 0;
  // Every category grows linearly with the rows: grow, then bisect.
  int64_t good = 1, bad = 2;
  while (peak(bad) <= limit_bytes) {
    good = bad;
    if (bad > (int64_t{1} << 40)) return good;
    bad *= 2;
  }
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    (peak(mid) <= limit_bytes ? good : bad) = mid;
  }
  return good;
}

// What the plan of every device reads: the run's shape, the parameters'
// layout, the Reducer's buckets and the input pipeline's depth.
struct PlanShape {
  int local = 1, global = 1, processes = 1;
  int64_t micro = 1, eval_rows = 0;
  int zero = 0;  // ZeRO stage, 0 with one replica
  // Neither the parameter server nor local SGD reduces gradients in
  // buckets; the servers' parameters, staged gradient and optimizer state
  // live on device 0 (distribute/parameter_server.h).
  bool parameter_server = false, reduces = false;
  int64_t parameter_bytes = 0, parameters = 0;
  // The Reducer's buckets (layout only), with ZeRO's padding.
  int64_t bucket_elements = 0, largest_bucket = 0, shard_elements = 0, largest_shard = 0;
  int64_t buckets = 0;
  int slots = 0;           // optimizer state tensors per parameter
  int64_t wire_bytes = 0;  // compressed-wire staging per element
  int64_t process_rows = 0;
  double depth = 0.0;                 // batches the input pipeline holds
  double feature = 0.0, whole = 0.0;  // bytes of an example's input feature, of the whole
};

// Rows of one evaluation batch on each replica.
int64_t evaluation_rows(const MemoryPlanInput& in) {
  const TrainConfig& c = in.config;
  const int local = in.layout.local_replicas;
  const int processes = std::max(1, in.layout.global_replicas / std::max(1, local));
  const int64_t eval_batch =
      in.validation_examples >= 0
          ? std::min(c.eval_batch_size, std::max<int64_t>(1, in.validation_examples))
          : c.eval_batch_size;
  return ceil_div(ceil_div(eval_batch, processes), local);
}

PlanShape plan_shape(const MemoryPlanInput& in, MemoryPlan& plan) {
  const TrainConfig& c = in.config;
  PlanShape s;
  s.local = in.layout.local_replicas;
  s.global = in.layout.global_replicas;
  s.processes = std::max(1, s.global / std::max(1, s.local));
  s.micro = c.micro_batch_size;
  s.eval_rows = evaluation_rows(in);
  // The parameters, in model order, from one more build (cheap beside the trace).
  std::vector<comm::TensorLayout> layouts;  // reverse order, as the Reducer's buckets
  {
    DeviceScope device(scratch_device());
    const std::vector<Variable> p = in.model.build()->parameters();
    s.parameters = static_cast<int64_t>(p.size());
    for (auto it = p.rbegin(); it != p.rend(); ++it) {
      layouts.push_back({it->shape(), it->dtype()});
      s.parameter_bytes += static_cast<int64_t>(it->value().nbytes());
      plan.parameter_count += it->value().numel();
    }
  }
  allocator_for(scratch_device()).release_cache();
  s.zero = s.global > 1 ? c.engine.reducer.zero_stage : 0;
  s.parameter_server = c.strategy.kind == distribute::StrategyKind::parameter_server;
  s.reduces = s.global > 1 && !s.parameter_server && c.engine.sync_every == 0;
  if (s.reduces) {
    const comm::Bucketer layout(layouts, {.bucket_bytes = c.engine.reducer.bucket_bytes,
                                          .first_bucket_bytes = c.engine.reducer.first_bucket_bytes,
                                          .pad_to = s.zero > 0 ? s.global : 1,
                                          .allocate = false});
    s.buckets = static_cast<int64_t>(layout.bucket_count());
    for (size_t b = 0; b < layout.bucket_count(); ++b) {
      const int64_t e = layout.bucket_elements(b);
      s.bucket_elements += e;
      s.largest_bucket = std::max(s.largest_bucket, e);
      s.shard_elements += e / s.global;
      s.largest_shard = std::max(s.largest_shard, e / s.global);
    }
  }
  s.slots = static_cast<int>(optim::state_slots(c.engine.optimizer).size());
  s.wire_bytes = c.engine.reducer.wire == comm::WireDType::f32 ? 0 : 2;  // bf16 and f16 staging
  s.process_rows = s.micro * c.engine.accumulation_steps * s.local;
  // The one training, the next, and the prefetched.
  s.depth = (c.prefetch_batches == data::kAutotune ? 2 : std::max(0, c.prefetch_batches)) + 2.0;
  s.feature = static_cast<double>(example_bytes(in.example, c.input_feature));
  s.whole = static_cast<double>(example_bytes(in.example));
  return s;
}

// What stays allocated on local replica r's device through a step, each
// category: fixed and per row of the micro-batch.
struct SteadyMemory {
  std::array<double, kCategories> fixed{}, per_row{};
};

constexpr int64_t f32 = 4;  // bytes of the master weights, gradients and state

SteadyMemory steady_memory(const MemoryPlanInput& in, const PlanShape& s, int r) {
  const TrainConfig& c = in.config;
  SteadyMemory m;
  auto& steady = m.fixed;
  auto& steady_per_row = m.per_row;
  // Parameters (ZeRO keeps them in padded flat buffers) and their casts.
  steady[index(MemoryCategory::parameters)] =
      static_cast<double>(s.zero > 0 ? s.bucket_elements * f32 : s.parameter_bytes) +
      (s.parameter_server && r == 0 ? static_cast<double>(s.parameter_bytes) : 0.0);
  // Gradients: the buckets (whole, padded under ZeRO-1), the shards
  // (ZeRO-2), or each parameter's own (one replica).
  steady[index(MemoryCategory::gradients)] =
      static_cast<double>(!s.reduces    ? s.parameter_bytes
                          : s.zero == 2 ? s.shard_elements * f32
                                        : s.bucket_elements * f32) +
      (s.parameter_server && r == 0 ? static_cast<double>(s.parameter_bytes) : 0.0);
  // Optimizer state: slots per element and one update count per tensor.
  steady[index(MemoryCategory::optimizer_state)] =
      s.parameter_server && r > 0
          ? 0.0
          : static_cast<double>(s.zero > 0 ? s.slots * s.shard_elements * f32 + s.buckets * 4
                                           : s.slots * s.parameter_bytes + s.parameters * 4);
  // Communication: the in-process group's staging on device 0, compressed
  // wire buffers, ZeRO-2's staging slots and ZeRO's all-gather input (and
  // the hierarchical all-gather's whole-bucket buffer across processes).
  double communication = 0.0;
  if (r == 0 && s.local > 1) {
    const int64_t small = comm::InProcessOptions{}.small_message_bytes;
    communication += 2.0 * static_cast<double>(ceil_div(small, 64) * 64 * s.local);
  }
  if (s.reduces) {
    communication += static_cast<double>(s.bucket_elements * s.wire_bytes);
    if (s.zero == 2) {
      communication +=
          static_cast<double>(std::min<int64_t>(distribute::Reducer::kStagingSlots, s.buckets) *
                              s.largest_bucket * f32);
    }
    if (s.zero > 0) communication += static_cast<double>(s.largest_shard * f32);
    if (s.zero > 0 && s.processes > 1) {
      communication += static_cast<double>(s.largest_bucket * f32);
    }
  }
  steady[index(MemoryCategory::communication)] = communication;
  // Input: device 0 holds the resident data and the pipeline's batches;
  // every other replica its share of the input feature.
  if (r == 0) {
    steady[index(MemoryCategory::input)] = static_cast<double>(in.resident_input_bytes);
    steady_per_row[index(MemoryCategory::input)] =
        s.depth * static_cast<double>(s.process_rows / s.micro) * s.whole;
  } else {
    steady_per_row[index(MemoryCategory::input)] =
        static_cast<double>(c.engine.accumulation_steps) * s.feature;
  }
  return m;
}

// Local replica r's device: the steady memory plus the traced step's own,
// each category's peak, and the transients.
DeviceMemoryPlan device_plan(const MemoryPlanInput& in, const PlanShape& s, const Trace& traced,
                             int r) {
  DeviceMemoryPlan d;
  d.device = cpu_device(r);
  SteadyMemory m = steady_memory(in, s, r);
  for (int k = 0; k < kCategories; ++k) m.fixed[k] += traced.persistent[k];
  const auto category = [](const StepFits& f, MemoryCategory cat) {
    return f.category[index(cat)];
  };
  // Each category's own peak: steady plus the step's own at its peak (a
  // training micro-batch, or at least an evaluation batch).
  for (int k = 0; k < kCategories; ++k) {
    const auto cat = static_cast<MemoryCategory>(k);
    d.fixed[k] = m.fixed[k] + category(traced.train, cat).fixed;
    d.per_row[k] = m.per_row[k] + category(traced.train, cat).per_row;
    if (in.evaluates) {
      const double eval_input =
          k == index(MemoryCategory::input) && r != 0 ? static_cast<double>(s.eval_rows) * s.feature
          : k == index(MemoryCategory::input) ? static_cast<double>(s.eval_rows * s.local) * s.whole
                                              : 0.0;
      d.floor[k] = m.fixed[k] + eval_input + category(traced.eval, cat).at(s.eval_rows);
    }
    d.steady_fixed += m.fixed[k];
    d.steady_per_row += m.per_row[k];
  }
  if (s.zero > 0 && in.writes_checkpoints) {
    // Gathering a checkpoint: a piece of every rank's shard at a time, and
    // on the chief's first device one bucket's slot at a time (written to
    // the file before the next is gathered) and the update counts.
    double gathered = static_cast<double>(
        s.global * std::min(s.largest_shard, distribute::ShardedOptimizer::kGatherPiece) * f32);
    if (r == 0 && in.chief) {
      gathered +=
          static_cast<double>((s.slots > 0 ? s.largest_bucket * f32 : 0) + s.parameters * 4);
    }
    d.fixed[index(MemoryCategory::optimizer_state)] += gathered;
    d.transient_floor = std::max(d.transient_floor, gathered);
  }
  d.transient_fixed = traced.train.total.fixed;
  d.transient_per_row = traced.train.total.per_row;
  if (in.evaluates) {
    d.transient_floor = std::max(d.transient_floor,
                                 traced.eval.total.at(s.eval_rows) +
                                     (r == 0 ? 0.0 : static_cast<double>(s.eval_rows) * s.feature));
  }
  return d;
}

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  const TrainConfig& c = in.config;
  if (c.micro_batch_size < 1) {
    TANDEM_THROW(InvalidArgument,
                 "memory plan: the batch sizes must be resolved first (micro-batch ",
                 c.micro_batch_size, ")");
  }
  MemoryPlan plan;
  plan.micro_batch = c.micro_batch_size;
  plan.accumulation_steps = c.engine.accumulation_steps;
  plan.global_replicas = in.layout.global_replicas;
  const auto start = Clock::now();
  const Trace traced = trace(in, c.micro_batch_size, evaluation_rows(in));
  plan.trace_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  plan.traced_rows = traced.rows;
  const PlanShape shape = plan_shape(in, plan);
  for (int r = 0; r < shape.local; ++r) plan.devices.push_back(device_plan(in, shape, traced, r));
  return plan;
}

void check_memory_limit(const MemoryPlan& plan, int64_t limit_bytes) {
  if (limit_bytes < 1)
    TANDEM_THROW(InvalidArgument, "the memory limit must be at least 1 byte, got ", limit_bytes);
  const DeviceMemoryPlan& d = plan.fullest(plan.micro_batch);
  const int64_t peak = d.total(plan.micro_batch);
  if (peak <= limit_bytes) return;
  const MemoryCategory largest = d.largest(plan.micro_batch);
  const int64_t fits = plan.largest_micro_batch(limit_bytes);
  const auto mib = [](int64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f", static_cast<double>(bytes) / (1 << 20));
    return std::string(text);
  };
  const int64_t per_micro = int64_t{plan.accumulation_steps} * plan.global_replicas;
  // Without room for one example, the advice follows what fills the memory
  // then: the data held in memory is not the model's state (it blamed the
  // model, and its advice could not help).
  const MemoryCategory fixed = d.largest(1);
  const std::string none_fits =
      fixed == MemoryCategory::input
          ? "Not even one example per replica fits: the input held in memory (" +
                mib(d.bytes(fixed, 1)) +
                " MiB; a data set loaded whole, as Fashion-MNIST is whatever --train-examples "
                "takes) is over the limit (raise --memory-limit, or read the data from files "
                "through a data specification)"
          : std::string(
                "Not even one example per replica fits: the model's state alone is over "
                "the limit (try --zero 2 across more replicas, or a smaller model)");
  TANDEM_THROW(
      InvalidArgument, "predicted peak of ", mib(peak), " MiB on ", d.device.to_string(),
      " exceeds the memory limit of ", mib(limit_bytes), " MiB; the largest part is ",
      memory_category_name(largest), " (", mib(d.bytes(largest, plan.micro_batch)), " MiB). ",
      fits > 0 ? "The largest global batch that fits is " + std::to_string(fits * per_micro) +
                     " (micro-batch " + std::to_string(fits) + ")"
               : none_fits);
}

int64_t default_memory_limit(int host_replicas) {
  return cpu_info().memory_bytes / std::max(1, host_replicas);
}

}  // namespace tandem::train
