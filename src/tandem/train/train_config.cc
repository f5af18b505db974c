#include "tandem/train/train_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "tandem/base/error.h"
#include "tandem/optim/lr_schedule.h"

namespace tandem::train {
void check_schedule_settings(const TrainConfig& c) {
  optim::schedule_name(c.schedule);  // refuses a value outside the enum
  if (!(c.lr_step_epochs > 0.0) || !std::isfinite(c.lr_step_epochs)) {
    TANDEM_THROW(InvalidArgument,
                 "lr_step_epochs (--lr-step-epochs) must be a positive number of epochs, got ",
                 c.lr_step_epochs);
  }
  if (!(c.lr_gamma > 0.0 && c.lr_gamma <= 1.0)) {
    TANDEM_THROW(InvalidArgument,
                 "lr_gamma (--lr-gamma) must be in (0, 1] (the step schedule's decay factor), got ",
                 c.lr_gamma);
  }
  const double lr = c.engine.optimizer.learning_rate;
  if (!(c.min_lr >= 0.0 && c.min_lr <= lr)) {
    TANDEM_THROW(InvalidArgument, "min_lr (--min-lr) must be in [0, ", lr,
                 "] (at most the learning rate the cosine schedule decays from), got ", c.min_lr);
  }
  if (!(c.warmup_epochs >= 0.0 && c.warmup_epochs <= static_cast<double>(c.epochs))) {
    TANDEM_THROW(InvalidArgument, "warmup_epochs (--warmup-epochs) must be in [0, ", c.epochs,
                 "] (at most the run's epochs), got ", c.warmup_epochs);
  }
}

void check_train_config(const TrainConfig& config) {
  if (config.epochs < 1)
    TANDEM_THROW(InvalidArgument, "epochs (--epochs) must be at least 1, got ", config.epochs);
  if (config.elastic_copy_every < 1) {
    TANDEM_THROW(InvalidArgument,
                 "elastic_copy_every (--elastic-copy-every) must be at least 1 step, got ",
                 config.elastic_copy_every);
  }
  if (config.checkpoint_every < 0) {
    TANDEM_THROW(InvalidArgument,
                 "checkpoint_every (--checkpoint-every) must be 0 (off) or a "
                 "number of steps, got ",
                 config.checkpoint_every);
  }
  if (config.stop_after_epochs < 0 || config.stop_after_epochs > config.epochs) {
    TANDEM_THROW(InvalidArgument, "stop_after_epochs (--stop-after-epochs) must be in [0, ",
                 config.epochs, "] (0: off; at most the run's epochs), got ",
                 config.stop_after_epochs);
  }
  if (config.steps_per_epoch < 0) {
    TANDEM_THROW(InvalidArgument,
                 "steps_per_epoch (--steps-per-epoch) must be >= 0 (0: one pass), got ",
                 config.steps_per_epoch);
  }
  if (config.repeat && config.steps_per_epoch == 0) {
    TANDEM_THROW(InvalidArgument,
                 "repeat (--repeat) needs steps_per_epoch (--steps-per-epoch): an epoch of data "
                 "that repeats would never end");
  }
  if (config.prefetch_batches < 0 && config.prefetch_batches != data::kAutotune) {
    TANDEM_THROW(InvalidArgument, "prefetch depth must be 0 or more batches (or autotune), got ",
                 config.prefetch_batches);
  }
  if (config.input_parallel_calls < 1 && config.input_parallel_calls != data::kAutotune) {
    TANDEM_THROW(InvalidArgument, "input parallel calls must be at least 1 (or autotune), got ",
                 config.input_parallel_calls);
  }
  if (config.noise_scale_every < 0) {
    TANDEM_THROW(InvalidArgument,
                 "noise_scale_every (--noise-scale-every) must be >= 0 (0: off), got ",
                 config.noise_scale_every);
  }
  if (config.eval_batch_size < 1) {
    TANDEM_THROW(InvalidArgument, "eval_batch_size (--eval-batch-size) must be at least 1, got ",
                 config.eval_batch_size);
  }
  optim::check_optimizer_config(config.engine.optimizer);
  // The scaling rule and its reference batch, checked before any replica is built.
  if (config.lr_scaling != "none") {
    optim::scaled_learning_rate(1.0, config.lr_scaling, 1, config.reference_batch);
  } else if (config.reference_batch != 0) {
    TANDEM_THROW(InvalidArgument,
                 "reference_batch (--reference-batch) applies to a learning-rate "
                 "scaling rule (--lr-scaling linear or sqrt)");
  }
  if (config.resume && config.output_dir.empty()) {
    TANDEM_THROW(InvalidArgument, "resume needs the output directory that holds the checkpoint");
  }
  // A pause is for a resume, which reads the pause's checkpoint.
  if (config.stop_after_epochs > 0 && config.output_dir.empty()) {
    TANDEM_THROW(InvalidArgument,
                 "stop_after_epochs (--stop-after-epochs) pauses for a later resume, which needs "
                 "the checkpoint in an output directory: give output_dir");
  }
  if (!config.loss.per_example) TANDEM_THROW(InvalidArgument, "Trainer needs a loss");
  if (config.input_feature.empty())
    TANDEM_THROW(InvalidArgument, "Trainer needs the name of the model's input feature");
  // Class metrics read integer class labels and scores per class: beside a
  // regression or binary loss they failed at the first batch with an
  // operator's message about label dtypes.
  const bool class_loss =
      config.loss.kind == "softmax_cross_entropy" || config.loss.kind == "custom";
  for (const Metric& m : config.metrics) {
    if (!m.measure || !m.value)
      TANDEM_THROW(InvalidArgument, "metric '", m.name, "' has no measure or value function");
    const bool class_metric = m.name == "accuracy" || m.name == "perplexity" ||
                              m.name == "bits_per_byte" || m.name.ends_with("_accuracy");
    if (class_metric && !class_loss) {
      TANDEM_THROW(InvalidArgument, "metric '", m.name,
                   "' scores classes against integer class labels, which the loss ",
                   config.loss.kind,
                   " does not train on (metrics (--metrics): mae, rmse for regression)");
    }
  }
}

void resolve_batch_sizes(TrainConfig& config, int replicas) {
  int64_t& global = config.batch_size;
  int64_t& micro = config.micro_batch_size;
  const int64_t steps = config.engine.accumulation_steps;
  if (global < 0 || (global == 0 && micro == 0)) {
    TANDEM_THROW(InvalidArgument, "batch_size (--batch-size) must be at least 1, got ", global);
  }
  if (micro < 0 || steps < 0 || (steps == 0 && micro == 0)) {
    TANDEM_THROW(InvalidArgument,
                 "accumulation_steps (--accumulate) must be at least 1 and micro_batch_size "
                 "(--micro-batch-size) at least 1 when given, got ",
                 steps, " and ", micro);
  }
  const std::string contract = " (the global batch is micro-batch x accumulation steps x " +
                               std::to_string(replicas) + " replicas)";
  // micro x steps x replicas, refused where it does not fit (it wrapped, or
  // divided by zero).
  const auto batch_of = [&](int64_t accumulation) {
    int64_t per_step = 0, whole = 0;
    if (__builtin_mul_overflow(micro, replicas, &per_step) ||
        __builtin_mul_overflow(per_step, accumulation, &whole)) {
      TANDEM_THROW(InvalidArgument, "micro-batch ", micro, " x ", accumulation,
                   " accumulation steps x ", replicas, " replicas is past any batch size");
    }
    return whole;
  };
  if (micro > 0 && global == 0) {
    global = batch_of(std::max<int64_t>(steps, 1));
    config.engine.accumulation_steps = static_cast<int>(std::max<int64_t>(steps, 1));
  } else if (micro > 0 && steps == 0) {
    if (global % batch_of(1) != 0) {
      TANDEM_THROW(InvalidArgument, "global batch ", global, " is not a multiple of micro-batch ",
                   micro, " x ", replicas, " replicas", contract);
    }
    const int64_t derived = global / batch_of(1);
    if (derived < 1 || derived > std::numeric_limits<int>::max()) {
      TANDEM_THROW(InvalidArgument, "global batch ", global, " with micro-batch ", micro,
                   " leaves ", derived, " accumulation steps", contract);
    }
    config.engine.accumulation_steps = static_cast<int>(derived);
  } else if (micro > 0 && global != batch_of(steps)) {
    TANDEM_THROW(InvalidArgument, "global batch ", global, ", micro-batch ", micro, " and ", steps,
                 " accumulation steps disagree: ", micro, " x ", steps, " x ", replicas, " = ",
                 batch_of(steps), contract);
  }
  split_global_batch(config, replicas);
}

void split_global_batch(TrainConfig& config, int replicas) {
  const int64_t global = config.batch_size;
  const std::string contract = " (the global batch is micro-batch x accumulation steps x " +
                               std::to_string(replicas) + " replicas)";
  if (global < replicas) {
    TANDEM_THROW(InvalidArgument, "global batch ", global, " has fewer examples than the ",
                 replicas, " replicas");
  }
  if (global % replicas != 0) {
    TANDEM_THROW(InvalidArgument, "global batch ", global, " does not divide among ", replicas,
                 " replicas (each replica takes global / replicas examples; "
                 "only an epoch's last, partial batch is split unevenly)");
  }
  const int64_t per_replica = global / replicas;
  if (per_replica % config.engine.accumulation_steps != 0) {
    TANDEM_THROW(InvalidArgument, "global batch ", global, " gives each of the ", replicas,
                 " replicas ", per_replica, " examples, which ", config.engine.accumulation_steps,
                 " accumulation steps do not split into equal micro-batches", contract);
  }
  config.micro_batch_size = per_replica / config.engine.accumulation_steps;
}

void check_batch_fits(const TrainConfig& config, const data::Dataset& train) {
  const int64_t examples = train.cardinality();
  if (examples == 0) TANDEM_THROW(InvalidArgument, "the training set has no examples");
  if (examples > 0 && examples < config.batch_size && config.drop_remainder) {
    TANDEM_THROW(InvalidArgument, "batch size ", config.batch_size,
                 " is larger than the training set (", examples,
                 " examples): with drop_remainder (--drop-remainder) no step would run");
  }
}

distribute::EngineOptions engine_options_of(const TrainConfig& config, precision::Policy policy) {
  distribute::EngineOptions options = config.engine;
  if (!options.loss_scale && policy == precision::Policy::mixed_float16)
    options.loss_scale = precision::LossScalerOptions{};
  return options;
}

}  // namespace tandem::train
