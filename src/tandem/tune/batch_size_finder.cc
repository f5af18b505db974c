#include "tandem/tune/batch_size_finder.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tandem/base/error.h"
#include "tandem/base/statistics.h"
#include "tandem/distribute/strategy.h"
#include "tandem/optim/lr_schedule.h"
#include "tandem/train/memory_plan.h"

namespace tandem::tune {
namespace {

// A short run of the user's configuration at another batch: no checkpoints,
// no evaluation, a fixed number of steps over the repeated data.
train::TrainConfig trial_config(const train::TrainConfig& base, int64_t batch, int64_t steps) {
  train::TrainConfig c = base;
  c.epochs = 1;
  c.batch_size = batch;
  c.micro_batch_size = 0;
  c.steps_per_epoch = steps;
  c.output_dir.clear();
  c.resume = false;
  c.schedule = optim::ScheduleKind::constant;
  c.warmup_epochs = 0.0;
  c.min_lr = 0.0;
  c.lr_scaling = "none";
  c.reference_batch = 0;
  c.noise_scale_every = 0;
  return c;
}

// The rule for an optimizer when the run names none: linear for SGD-type
// updates, square root for Adam-type ones.
std::string default_rule(optim::OptimizerKind optimizer) {
  return optimizer == optim::OptimizerKind::sgd || optimizer == optim::OptimizerKind::lars
             ? "linear"
             : "sqrt";
}

// What the phases of the finder share: the options, the strategy's layout
// and one example (for the memory plans).
struct Search {
  const BatchSizeFinderOptions& o;
  distribute::StrategyLayout layout;
  int64_t replicas;
  data::Element example;

  // The memory plan of one step at `micro` examples per replica.
  train::MemoryPlan plan_at(int64_t micro) const {
    train::TrainConfig planned = o.config;
    planned.engine.accumulation_steps = 1;
    planned.micro_batch_size = micro;
    planned.batch_size = micro * replicas;
    return train::plan_memory({.model = o.model,
                               .config = planned,
                               .layout = layout,
                               .example = example,
                               .evaluates = false,
                               .resident_input_bytes = o.resident_input_bytes});
  }
  bool fits(int64_t micro) const { return plan_at(micro).peak(micro) <= o.memory_limit; }
};

// The largest micro-batch the memory allows (one micro-batch per step). A
// plan extrapolates from the rows it traced, and the kernels' memory need
// not grow in a line from one row to hundreds (oneDNN picks other
// algorithms and scratchpads for other batches), so the answer is planned
// again from a trace near it until it holds there.
int64_t largest_fitting_micro_batch(const Search& search) {
  const int64_t limit = search.o.memory_limit;
  const train::MemoryPlan first_plan = search.plan_at(1);
  int64_t micro = first_plan.largest_micro_batch(limit);
  if (micro < 1) train::check_memory_limit(first_plan, limit);  // throws, naming the parts
  for (int round = 0; round < 4; ++round) {
    const train::MemoryPlan near = search.plan_at(micro);
    const int64_t by_near = near.largest_micro_batch(limit);
    if (near.peak(micro) > limit) {
      micro = std::max<int64_t>(1, std::min(micro - 1, by_near));
    } else if (by_near > micro && search.fits(by_near)) {
      micro = by_near;  // fits as traced near it; perhaps more does
    } else {
      return micro;
    }
  }
  // The traces disagree: bisect between one row and the last answer.
  int64_t good = 0, bad = micro + 1;
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    (search.fits(mid) ? good : bad) = mid;
  }
  if (good < 1) train::check_memory_limit(search.plan_at(1), limit);  // throws, naming the parts
  return good;
}

// Throughput along the series of batches, doubling from the smallest, and
// at the run's own batch when it is in range (so that its predicted time
// to a target is measured, not missing).
std::vector<BatchSizeTrial> time_batches(
    const Search& search, int64_t largest, const data::Dataset& repeated,
    const std::function<void(const BatchSizeTrial&)>& on_trial) {
  const BatchSizeFinderOptions& o = search.o;
  const int64_t replicas = search.replicas;
  const int64_t first =
      std::min(o.min_batch > 0 ? o.min_batch : 8 * replicas, std::min(largest, o.max_batch));
  if (first % replicas != 0) {
    TANDEM_THROW(InvalidArgument, "the smallest batch to try (", first, ") must divide among the ",
                 replicas, " replicas");
  }
  const int64_t last = std::min(largest, o.max_batch);
  std::vector<int64_t> batches;
  for (int64_t batch = first; batch <= last; batch *= 2) batches.push_back(batch);
  const int64_t own = o.config.batch_size;
  if (own > first && own <= last && own % replicas == 0 &&
      std::find(batches.begin(), batches.end(), own) == batches.end()) {
    batches.insert(std::upper_bound(batches.begin(), batches.end(), own), own);
  }
  std::vector<BatchSizeTrial> trials;
  std::vector<double> times;
  for (const int64_t batch : batches) {
    times.clear();
    train::Trainer trainer(trial_config(o.config, batch, o.warmup_steps + o.timed_steps), o.model);
    trainer.fit(repeated, std::nullopt, {.on_step = [&](const train::StepInfo& s) {
                  if (s.step > o.warmup_steps) times.push_back(s.step_seconds);
                }});
    BatchSizeTrial t{
        .batch = batch,
        .examples_per_second = static_cast<double>(batch) / median(times),
        .predicted_peak_bytes = search.plan_at(batch / replicas).peak(batch / replicas)};
    trials.push_back(t);
    if (on_trial) on_trial(t);
  }
  return trials;
}

// The noise scale at the run's own batch (with one replica, two
// micro-batches supply the second batch size); NaN when none was measured.
double measure_noise_scale(const Search& search, const data::Dataset& repeated) {
  const BatchSizeFinderOptions& o = search.o;
  train::TrainConfig c = trial_config(o.config, o.config.batch_size, o.noise_steps);
  c.noise_scale_every = 1;
  if (search.replicas == 1) c.engine.accumulation_steps = std::max(c.engine.accumulation_steps, 2);
  if (c.batch_size % (search.replicas * c.engine.accumulation_steps) != 0)
    c.engine.accumulation_steps = 1;
  train::Trainer trainer(c, o.model);
  double noise_scale = std::numeric_limits<double>::quiet_NaN();
  trainer.fit(repeated, std::nullopt,
              {.on_step = [&](const train::StepInfo& s) { noise_scale = s.noise_scale; }});
  return noise_scale;
}

// The batch of the shortest time to a target, up to a constant:
// (B + B_noise) / throughput (without a noise scale every example counts
// the same and the fastest wins), and its learning rate and warm-up.
void recommend(const train::TrainConfig& config, BatchSizeRecommendation& out) {
  const double noise = std::isfinite(out.noise_scale) ? std::max(0.0, out.noise_scale) : 0.0;
  double best = std::numeric_limits<double>::infinity();
  for (const BatchSizeTrial& t : out.trials)
    best = std::min(best, (static_cast<double>(t.batch) + noise) / t.examples_per_second);
  for (BatchSizeTrial& t : out.trials) {
    t.relative_time = (static_cast<double>(t.batch) + noise) / t.examples_per_second / best;
    if (t.relative_time == 1.0 && out.batch == 0) out.batch = t.batch;
  }
  out.lr_scaling =
      config.lr_scaling != "none" ? config.lr_scaling : default_rule(config.engine.optimizer.kind);
  out.reference_batch = config.reference_batch > 0 ? config.reference_batch : config.batch_size;
  out.learning_rate = optim::scaled_learning_rate(config.engine.optimizer.learning_rate,
                                                  out.lr_scaling, out.batch, out.reference_batch);
  out.warmup_epochs = out.batch > out.reference_batch
                          ? std::min(5.0, static_cast<double>(config.epochs) / 5.0)
                          : config.warmup_epochs;
}

}  // namespace

BatchSizeRecommendation find_batch_size(
    const BatchSizeFinderOptions& o, const std::function<void(const BatchSizeTrial&)>& on_trial) {
  if (o.memory_limit < 1) TANDEM_THROW(InvalidArgument, "the finder needs a memory limit");
  if (o.timed_steps < 1 || o.warmup_steps < 0 || o.noise_steps < 1 || o.max_batch < 1) {
    TANDEM_THROW(InvalidArgument, "finder steps must be positive (timed ", o.timed_steps,
                 ", warm-up ", o.warmup_steps, ", noise ", o.noise_steps,
                 ") and the largest batch at "
                 "least 1, got ",
                 o.max_batch);
  }
  const distribute::StrategyLayout layout = distribute::strategy_layout(o.config.strategy);
  const std::optional<data::Element> example = o.train.take(1).iterator().next();
  if (!example) TANDEM_THROW(InvalidArgument, "the training data has no examples");
  const Search search{o, layout, layout.global_replicas, *example};
  BatchSizeRecommendation out;
  out.largest_fitting_batch = largest_fitting_micro_batch(search) * search.replicas;
  const data::Dataset repeated = o.train.repeat();
  out.trials = time_batches(search, out.largest_fitting_batch, repeated, on_trial);
  out.noise_scale = measure_noise_scale(search, repeated);
  recommend(o.config, out);
  return out;
}

}  // namespace tandem::tune
