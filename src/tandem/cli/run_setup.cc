#include "tandem/cli/run_setup.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>

#include "tandem/base/error.h"
#include "tandem/base/parse_number.h"
#include "tandem/base/random.h"
#include "tandem/cli/commands.h"
#include "tandem/cli/memory_plan_output.h"
#include "tandem/comm/compression.h"
#include "tandem/data/input_spec.h"
#include "tandem/optim/optimizer.h"
#include "tandem/train/memory_plan.h"

namespace tandem::cli {

namespace {

// --loss-scale: "dynamic", "none" or a fixed positive number; unset picks
// dynamic for mixed_float16 and none otherwise, as Keras does.
std::optional<precision::LossScalerOptions> parse_loss_scale(const std::string& text,
                                                             precision::Policy policy) {
  if (text.empty()) {
    if (policy == precision::Policy::mixed_float16) return precision::LossScalerOptions{};
    return std::nullopt;
  }
  if (text == "dynamic") return precision::LossScalerOptions{};
  if (text == "none") {
    if (policy == precision::Policy::mixed_float16) {
      fmt::print(stderr,
                 "tandem: warning: mixed_float16 without loss scaling; small gradients will "
                 "flush to zero and overflowing steps are skipped at scale 1\n");
      return precision::LossScalerOptions{.dynamic = false, .initial_scale = 1.0};
    }
    return std::nullopt;
  }
  double scale = 0.0;
  try {
    size_t used = 0;
    scale = std::stod(text, &used);
    if (used != text.size()) scale = 0.0;
  } catch (const std::exception&) {
    scale = 0.0;
  }
  if (!(scale > 0.0) || !std::isfinite(scale)) {
    TANDEM_THROW(InvalidArgument, "--loss-scale must be dynamic, none or a positive number, got '",
                 text, "'");
  }
  return precision::LossScalerOptions{.dynamic = false, .initial_scale = scale};
}

// A count flag that also takes "auto" (data::kAutotune).
int parse_count_or_auto(const std::string& flag, const std::string& text, int minimum) {
  if (text == "auto") return data::kAutotune;
  const std::optional<int64_t> value = parse_number<int64_t>(text);
  if (!value || *value < minimum || *value > 1024) {
    TANDEM_THROW(InvalidArgument, flag, " must be a whole number >= ", minimum,
                 " (at most 1024) or 'auto', got '", text, "'");
  }
  return static_cast<int>(*value);
}

// --precision and --loss-scale (parse_loss_scale), the data (load_run_data),
// the loss and metrics (configure_objective) and the input pipeline
// (configure_input).
void add_data_options(CLI::App& app, RunOptions& o) {
  CLI::App* command = &app;
  train::TrainConfig& c = o.config;
  command
      ->add_option("--precision", o.precision,
                   "Mixed-precision policy: float32, mixed_bfloat16 or mixed_float16")
      ->capture_default_str();
  command->add_option("--loss-scale", o.loss_scale,
                      "Loss scaling: dynamic, none or a fixed number (default: dynamic under "
                      "mixed_float16, none otherwise)");
  command->add_option("--compute-dtype", o.compute_dtype,
                      "Override the matmul/conv dtype: f32 or bf16 (default: the policy's)");
  command->add_option("--data", o.data,
                      "Training data: a data specification (TOML, docs/training.md) or a folder "
                      "of images with one sub-folder per class (default: Fashion-MNIST)");
  command->add_option("--validation-data", o.validation_data,
                      "Validation data, described like --data (default: Fashion-MNIST's test set "
                      "without --data, none with it)");
  command
      ->add_option("--loss", o.loss,
                   "softmax_cross_entropy, binary_cross_entropy, mean_squared_error, "
                   "mean_absolute_error or huber (or Keras's sparse_categorical_crossentropy, "
                   "binary_crossentropy, mse, mae)")
      ->capture_default_str();
  command->add_option("--label-smoothing", o.label_smoothing,
                      "softmax_cross_entropy: label smoothing in [0, 1) (default: 0)");
  command->add_option("--ignore-index", o.ignore_index,
                      "softmax_cross_entropy (and its metrics): a label value left out");
  command->add_option("--huber-delta", o.huber_delta, "huber: the delta, > 0 (default: 1)");
  command->add_option(
      "--metrics", o.metrics,
      "Comma-separated: accuracy, topK_accuracy, mae, rmse, perplexity, bits_per_byte, or none "
      "(default: accuracy for softmax_cross_entropy, mae,rmse for regression)");
  command
      ->add_option("--steps-per-epoch", c.steps_per_epoch,
                   "Steps per epoch from one pass over the data (0: an epoch is a pass)")
      ->capture_default_str();
  command->add_flag("--repeat", c.repeat,
                    "With --steps-per-epoch: the next pass over the training data follows when "
                    "one ends (tf.data's repeat()); without it the run ends with the data");
  command
      ->add_option("--auto-shard", o.auto_shard,
                   "Multi-worker input sharding: auto, file, data or off")
      ->capture_default_str();
  command->add_option("--data-dir", o.data_dir, "Directory with the Fashion-MNIST IDX files")
      ->capture_default_str();
  command->add_option("--train-examples", o.train_examples,
                      "Use only the first N Fashion-MNIST training examples (0, the default: all)");
  command->add_option("--test-examples", o.test_examples,
                      "Use only the first N Fashion-MNIST test examples (0, the default: all)");
  command
      ->add_option("--prefetch", o.prefetch,
                   "Batches assembled ahead on a background thread (0: when the step starts; "
                   "auto: grown while steps wait)")
      ->capture_default_str();
  command
      ->add_option("--input-parallel", o.input_parallel,
                   "Batches assembled at once on the data pool (auto: grown while steps wait)")
      ->capture_default_str();
  command
      ->add_option("--augment", o.augment,
                   "Random augmentation of training batches: none, flip, crop:PIXELS, or a "
                   "comma-separated list (flip,crop:2)")
      ->capture_default_str();
}

// --loss and its options, --metrics (default: accuracy for a classifier,
// mae and rmse for a regression) against the data's label feature.
void configure_objective(const RunOptions& o, const std::string& label,
                         train::TrainConfig& config) {
  const std::string loss = train::canonical_loss_name(o.loss);
  if (o.label_smoothing) {
    if (!(*o.label_smoothing >= 0.0 && *o.label_smoothing < 1.0)) {
      TANDEM_THROW(InvalidArgument, "--label-smoothing must be in [0, 1), got ",
                   *o.label_smoothing);
    }
    if (loss != "softmax_cross_entropy") {
      TANDEM_THROW(InvalidArgument,
                   "--label-smoothing applies to --loss softmax_cross_entropy, not ", loss);
    }
  }
  if (o.huber_delta) {
    if (!(*o.huber_delta > 0.0) || !std::isfinite(*o.huber_delta))
      TANDEM_THROW(InvalidArgument, "--huber-delta must be positive and finite, got ",
                   *o.huber_delta);
    if (loss != "huber")
      TANDEM_THROW(InvalidArgument, "--huber-delta applies to --loss huber, not ", loss);
  }
  // Only class labels have an index to ignore: the other losses (and their
  // metrics, mae and rmse) would train on the rows it names.
  if (o.ignore_index && loss != "softmax_cross_entropy") {
    TANDEM_THROW(InvalidArgument, "--ignore-index applies to --loss softmax_cross_entropy, not ",
                 loss);
  }
  config.loss = train::make_loss(loss, {.labels = label,
                                        .ignore_index = o.ignore_index,
                                        .label_smoothing = o.label_smoothing.value_or(0.0),
                                        .delta = o.huber_delta.value_or(1.0)});
  std::vector<std::string> names = split_list(o.metrics);
  if (o.metrics.empty()) {
    if (loss == "softmax_cross_entropy") names = {"accuracy"};
    if (loss == "mean_squared_error" || loss == "mean_absolute_error" || loss == "huber")
      names = {"mae", "rmse"};
  }
  config.metrics.clear();
  if (o.metrics == "none") return;
  for (const std::string& name : names)
    config.metrics.push_back(
        train::make_metric(name, {.labels = label, .ignore_index = o.ignore_index}));
}

// Counts where 0 or a negative number would be silently taken for something else.
void check_counts(const RunOptions& o) {
  if (o.devices && *o.devices < 1) {
    TANDEM_THROW(InvalidArgument,
                 "--devices must be at least 1 (omit it for one device per physical core), got ",
                 *o.devices);
  }
  if (o.threads && *o.threads < 1) {
    TANDEM_THROW(InvalidArgument,
                 "--threads must be at least 1 (omit it for physical cores / devices), got ",
                 *o.threads);
  }
  if (o.train_examples < 0)
    TANDEM_THROW(InvalidArgument, "--train-examples must be 0 (all) or more, got ",
                 o.train_examples);
  if (o.test_examples < 0)
    TANDEM_THROW(InvalidArgument, "--test-examples must be 0 (all) or more, got ", o.test_examples);
  // At least one byte, and far from the int64 overflow of the conversion.
  constexpr int64_t kMaxBucketMb = int64_t{1} << 20;
  if (o.bucket_mb &&
      !(*o.bucket_mb * (1 << 20) >= 1.0 && *o.bucket_mb <= static_cast<double>(kMaxBucketMb))) {
    TANDEM_THROW(InvalidArgument, "--bucket-mb must be a positive number of MiB (one byte to ",
                 kMaxBucketMb, " MiB), got ", *o.bucket_mb);
  }
}

// --optimizer, its settings and the learning-rate schedule: configure_optimizer
// and configure_schedule apply them.
void add_optimizer_options(CLI::App& app, RunOptions& o) {
  CLI::App* command = &app;
  train::TrainConfig& c = o.config;
  command->add_option("--optimizer", o.optimizer, "sgd, adam, adamw, lars or lamb")
      ->capture_default_str();
  command->add_option("--trust-coefficient", o.trust_coefficient,
                      "LARS's trust coefficient eta (> 0; default 0.001)");
  command->add_option("--lr", o.learning_rate,
                      "Learning rate (default: 0.05 for sgd, 0.001 for adam, adamw and lamb, 1 "
                      "for lars)");
  command->add_option("--momentum", o.momentum,
                      "Momentum of sgd and lars, in [0, 1) (default: 0.9)");
  command->add_flag("--nesterov", c.engine.optimizer.nesterov, "Nesterov momentum (SGD)");
  command->add_option("--weight-decay", o.weight_decay,
                      "Weight decay, >= 0 (default: 0, or 0.01 for adamw and lamb)");
  command
      ->add_option("--clip-norm", c.engine.optimizer.global_clip_norm,
                   "Clip the gradients to this global L2 norm before each update (Keras's "
                   "global_clipnorm; after the all-reduce; 0: off)")
      ->capture_default_str();
  command->add_option("--schedule", o.schedule, "Learning-rate schedule: constant, step or cosine")
      ->capture_default_str();
  command
      ->add_option("--lr-step-epochs", c.lr_step_epochs,
                   "Step schedule: epochs between decays (> 0)")
      ->capture_default_str();
  command->add_option("--lr-gamma", c.lr_gamma, "Step schedule: decay factor in (0, 1]")
      ->capture_default_str();
  command->add_option("--min-lr", c.min_lr, "Cosine schedule: final learning rate, from 0 to --lr")
      ->capture_default_str();
  command->add_option("--warmup-epochs", o.warmup_epochs,
                      "Linear warm-up length in epochs, from 0 to --epochs (default: 0, or "
                      "min(5, epochs / 5) with --lr-scaling)");
  command
      ->add_option("--noise-scale-every", c.noise_scale_every,
                   "Measure the gradient noise scale every N steps (0: never; needs several "
                   "replicas or --accumulate; docs/tuning.md)")
      ->capture_default_str();
  command
      ->add_option("--lr-scaling", c.lr_scaling,
                   "Scale the learning rate with the global batch: none, linear (Goyal et al., "
                   "for SGD) or sqrt (for Adam-type), from --reference-batch")
      ->capture_default_str();
  command->add_option("--reference-batch", c.reference_batch,
                      "The global batch --lr is tuned at, for --lr-scaling");
}

// --optimizer and its flags. Without --lr the optimizer's own default
// (0.05 for sgd, 1e-3 for adam and adamw); momentum and Nesterov are SGD's.
void configure_optimizer(const RunOptions& o, optim::OptimizerConfig& c) {
  c.kind = optim::parse_optimizer(o.optimizer);
  const std::string_view name = optim::optimizer_name(c.kind);
  const double default_lr = optim::default_learning_rate(c.kind);
  if (o.learning_rate && (!(*o.learning_rate > 0.0) || !std::isfinite(*o.learning_rate)))
    TANDEM_THROW(InvalidArgument, "--lr must be positive and finite, got ", *o.learning_rate);
  c.learning_rate = o.learning_rate.value_or(default_lr);
  using optim::OptimizerKind;
  if (c.nesterov && c.kind != OptimizerKind::sgd)
    TANDEM_THROW(InvalidArgument, "--nesterov applies to --optimizer sgd, not ", name);
  if (o.momentum && c.kind != OptimizerKind::sgd && c.kind != OptimizerKind::lars)
    TANDEM_THROW(InvalidArgument, "--momentum applies to --optimizer sgd and lars, not ", name);
  if (o.trust_coefficient) {
    if (c.kind != OptimizerKind::lars) {
      TANDEM_THROW(InvalidArgument, "--trust-coefficient applies to --optimizer lars, not ", name);
    }
    c.trust_coefficient = *o.trust_coefficient;
  }
  if (o.momentum) {
    if (!(*o.momentum >= 0.0 && *o.momentum < 1.0))
      TANDEM_THROW(InvalidArgument, "--momentum must be in [0, 1), got ", *o.momentum);
    c.momentum = *o.momentum;
  }
  if (o.weight_decay) {
    if (!(*o.weight_decay >= 0.0) || !std::isfinite(*o.weight_decay)) {
      TANDEM_THROW(InvalidArgument, "--weight-decay must be >= 0 and finite, got ",
                   *o.weight_decay);
    }
    c.weight_decay = *o.weight_decay;
  }
}

// --schedule and --warmup-epochs (the schedule's other flags go straight into
// the config).
void configure_schedule(const RunOptions& o, train::TrainConfig& config) {
  config.schedule = optim::parse_schedule(o.schedule);
  // Goyal et al.'s gradual warm-up (5 of 90 epochs) goes with a scaled rate.
  config.warmup_epochs = o.warmup_epochs.value_or(
      config.lr_scaling != "none" ? std::min(5.0, static_cast<double>(config.epochs) / 5.0) : 0.0);
}

// --model and --model-options, the batch settings, --recompute, --memory-limit
// and --zero: configure_batch_and_sharding and model_factory apply them.
void add_model_and_batch_options(CLI::App& app, RunOptions& o) {
  CLI::App* command = &app;
  train::TrainConfig& c = o.config;
  command
      ->add_option("--model", o.model,
                   "Model: cnn, mlp, gpt, resnet, or a model file (FILE.toml, docs/model_files.md)")
      ->capture_default_str();
  command->add_option("--model-options", o.model_options,
                      "A built-in model's settings, KEY=VALUE,... (gpt: layers, width, heads, "
                      "context, vocabulary, mlp_ratio, dropout; resnet: depth, width, channels, "
                      "classes, sync_bn)");
  command->add_option("--batch-size,--batch", o.batch_size,
                      "Global batch size (default: 128, or micro-batch x accumulation steps x "
                      "replicas with --micro-batch-size)");
  command->add_option("--accumulate", o.accumulate,
                      "Gradient accumulation: micro-batches per step, whose gradients make one "
                      "update (default: 1, or global / (micro-batch x replicas))");
  command->add_option("--micro-batch-size", o.micro_batch_size,
                      "Examples per replica per micro-batch (default: global / (replicas x "
                      "accumulation steps)); any two of the three batch settings fix the third");
  command->add_flag("--recompute", o.recompute,
                    "Activation recomputation: every Transformer, ResNet or residual block keeps "
                    "only its input and computes its inside again in backward (docs/memory.md)");
  command->add_option("--memory-limit", o.memory_limit,
                      "Bytes per device a run may use (suffix K, M, G or T: powers of 1024; "
                      "default: physical memory / devices); a run predicted to need more is "
                      "refused before training");
  command
      ->add_option("--zero", o.zero,
                   "ZeRO sharding across replicas: 0 off, 1 optimizer state, 2 optimizer state "
                   "and gradients (docs/memory.md)")
      ->capture_default_str();
  command->add_option("--eval-batch-size", c.eval_batch_size, "Batch size for evaluation")
      ->capture_default_str();
  command->add_flag("--drop-remainder", c.drop_remainder,
                    "Skip the last partial batch of each epoch (default: train on it)");
}

// --batch-size, --accumulate and --micro-batch-size (any two determine the
// third; the Trainer derives the missing one once it knows the replica
// count), --zero and the bucket size that goes with it.
void configure_batch_and_sharding(const RunOptions& o, train::TrainConfig& config) {
  const auto at_least_one = [](const char* flag, auto value) {
    if (value < 1) TANDEM_THROW(InvalidArgument, flag, " must be at least 1, got ", value);
  };
  if (o.batch_size) at_least_one("--batch-size", *o.batch_size);
  if (o.accumulate) at_least_one("--accumulate", *o.accumulate);
  if (o.micro_batch_size) at_least_one("--micro-batch-size", *o.micro_batch_size);
  if (o.micro_batch_size) {
    config.micro_batch_size = *o.micro_batch_size;
    config.batch_size = o.batch_size.value_or(0);
    config.engine.accumulation_steps = o.accumulate.value_or(o.batch_size ? 0 : 1);
  } else {
    config.batch_size = o.batch_size.value_or(128);
    config.engine.accumulation_steps = o.accumulate.value_or(1);
  }
  if (o.zero == 3) {
    TANDEM_THROW(InvalidArgument,
                 "--zero 3 (parameters sharded too, gathered layer by layer) is not offered; "
                 "--zero 1 shards the optimizer state, --zero 2 also the gradients");
  }
  if (o.zero < 0 || o.zero > 2)
    TANDEM_THROW(InvalidArgument, "--zero must be 0 (off), 1 or 2, got ", o.zero);
  config.engine.reducer.zero_stage = o.zero;
  // ZeRO-2 stages buckets through three buffers of the largest bucket:
  // small buckets keep that below the gradients it saves (docs/memory.md).
  const double bucket_mb =
      o.bucket_mb.value_or(o.zero == 2 ? 1.0 : 25.0);  // checked by check_counts
  config.engine.reducer.bucket_bytes = static_cast<int64_t>(bucket_mb * (1 << 20));
}

}  // namespace

namespace {

// "R:FACTOR" for --slow-replica.
distribute::SlowReplica parse_slow_replica(const std::string& text) {
  const size_t colon = text.find(':');
  distribute::SlowReplica slow;
  try {
    size_t used = 0;
    if (colon == std::string::npos) throw std::invalid_argument(text);
    slow.replica = std::stoi(text.substr(0, colon), &used);
    if (used != colon) throw std::invalid_argument(text);
    const std::string factor = text.substr(colon + 1);
    slow.factor = std::stod(factor, &used);
    if (used != factor.size()) throw std::invalid_argument(text);
  } catch (const std::logic_error&) {
    TANDEM_THROW(InvalidArgument, "--slow-replica takes REPLICA:FACTOR (e.g. 1:2), got '", text,
                 "'");
  }
  if (slow.replica < 0) {
    TANDEM_THROW(InvalidArgument, "--slow-replica's replica must be at least 0, got ",
                 slow.replica);
  }
  return slow;  // the factor's range and the replica's existence: check_engine_options
}

// --seed, the strategy, its devices and threads, timeouts, the update rule and
// the wire: configure_strategy and configure_update_rule apply them.
void add_strategy_options(CLI::App& app, RunOptions& o) {
  CLI::App* command = &app;
  command
      ->add_option("--seed", o.seed,
                   "Seed for initialisation, shuffling and dropout (0 to 2^64 - 1)")
      ->capture_default_str();
  command->add_option("--threads", o.threads,
                      "Intra-op threads per device (default: physical cores / devices)");
  command
      ->add_option("--strategy", o.strategy,
                   "one-device, mirrored, multi-worker (under mpirun) or parameter-server")
      ->capture_default_str();
  command
      ->add_option("--device", o.device,
                   "cpu (virtual CPU devices) or cuda (GPUs: one-device, mirrored or multi-worker)")
      ->capture_default_str();
  command->add_option("--devices", o.devices,
                      "Replicas (virtual CPU devices) in this process, at least 1 (default: one "
                      "per physical core)");
  command->add_option("--ps", o.ps,
                      "Parameter-server shards the variables are partitioned over (--strategy "
                      "parameter-server; default: 1)");
  command->add_option("--max-staleness", o.max_staleness,
                      "Parameter server: the largest staleness of an applied gradient (0: "
                      "synchronous rounds; default: unbounded, fully asynchronous)");
  command->add_option("--backup-workers", o.backup_workers,
                      "Parameter server, synchronous rounds: apply each round with the first "
                      "workers - B gradients and drop the late ones");
  command->add_flag("--staleness-aware-lr", o.staleness_aware_lr,
                    "Parameter server: divide each gradient's learning rate by its staleness");
  command->add_option("--sync-every", o.sync_every,
                      "Local SGD: replicas step on their own and average parameters every K "
                      "steps (mirrored or multi-worker; default: off, all-reduce every step)");
  command->add_flag("--average-optimizer-state", o.average_optimizer_state,
                    "Local SGD: average the optimizer state with the parameters");
  command->add_option("--slow-replica", o.slow_replica,
                      "Make replica R FACTOR times slower (R:FACTOR, e.g. 1:2), to see what a "
                      "straggler does");
  command->add_flag("--allow-oversubscription", o.allow_oversubscription,
                    "Allow more devices x threads than physical cores (one device included)");
  command
      ->add_option("--collective-timeout", o.collective_timeout,
                   "Seconds a collective waits for the other replicas before the run ends with a "
                   "stall report naming the ranks that did not answer (1 to 86400)")
      ->capture_default_str();
  command
      ->add_option("--peer-timeout", o.peer_timeout,
                   "Under mpirun: seconds a waiting rank asks a peer process that answers "
                   "nothing before the run ends naming that rank's host as unreachable; under "
                   "tandem launch --elastic: seconds a member's heartbeat may stay still before "
                   "the others give it up (1 to 86400)")
      ->capture_default_str();
  command->add_option("--bucket-mb", o.bucket_mb,
                      "Gradient fusion bucket size in MiB (> 0; default: 25, 1 with --zero 2)");
  command->add_option("--wire", o.wire, "Gradient all-reduce wire dtype: f32, bf16 or f16")
      ->capture_default_str();
}

}  // namespace

void configure_update_rule(const RunOptions& o, train::TrainConfig& config) {
  const bool ps = config.strategy.kind == distribute::StrategyKind::parameter_server;
  const std::pair<bool, const char*> ps_only[] = {{o.ps.has_value(), "--ps"},
                                                  {!o.max_staleness.empty(), "--max-staleness"},
                                                  {o.backup_workers != 0, "--backup-workers"},
                                                  {o.staleness_aware_lr, "--staleness-aware-lr"}};
  for (const auto& [given, flag] : ps_only) {
    if (given && !ps) {
      TANDEM_THROW(InvalidArgument, flag, " applies to --strategy parameter-server, not ",
                   o.strategy);
    }
  }
  distribute::ParameterServerOptions& p = config.engine.parameter_server;
  p.shards = o.ps.value_or(1);  // its range: check_engine_options
  config.strategy.ps_shards = p.shards;
  p.backup_workers = o.backup_workers;
  p.staleness_aware_lr = o.staleness_aware_lr;
  if (!o.max_staleness.empty() && o.max_staleness != "unbounded") {
    size_t used = 0;
    try {
      p.max_staleness = std::stoll(o.max_staleness, &used);
    } catch (const std::logic_error&) {
      used = 0;
    }
    if (used == 0 || used != o.max_staleness.size()) {
      TANDEM_THROW(InvalidArgument,
                   "--max-staleness takes a count of updates (0: synchronous) "
                   "or 'unbounded', got '",
                   o.max_staleness, "'");
    }
  } else if (o.max_staleness.empty() && o.backup_workers > 0) {
    p.max_staleness = 0;  // backup workers are a synchronous rule
  }
  if (o.sync_every != 0 && (ps || config.strategy.kind == distribute::StrategyKind::one_device)) {
    TANDEM_THROW(InvalidArgument,
                 "--sync-every (local SGD) averages the replicas of --strategy "
                 "mirrored or multi-worker, not ",
                 o.strategy);
  }
  if (o.average_optimizer_state && o.sync_every == 0)
    TANDEM_THROW(InvalidArgument, "--average-optimizer-state goes with --sync-every (local SGD)");
  // The wire dtype is the gradient all-reduce's: local SGD averages f32
  // parameters and the parameter server sends f32 over its own links.
  if (o.wire != "f32" && (ps || o.sync_every != 0)) {
    TANDEM_THROW(InvalidArgument, "--wire ", o.wire, " compresses the gradient all-reduce; ",
                 ps ? "the parameter server" : "local SGD (--sync-every)", " sends f32");
  }
  config.engine.sync_every = o.sync_every;  // its range: check_engine_options
  config.engine.average_optimizer_state = o.average_optimizer_state;
  if (!o.slow_replica.empty()) config.engine.slow_replica = parse_slow_replica(o.slow_replica);
}

bool is_model_file(const std::string& model) {
  return model.ends_with(".toml") || std::filesystem::is_regular_file(model);
}

namespace {

// --device, --devices, --threads, --allow-oversubscription and the timeouts
// into config.strategy (its name is set before).
void configure_strategy(const RunOptions& o, train::TrainConfig& config) {
  if (o.device != "cpu" && o.device != "cuda") {
    TANDEM_THROW(InvalidArgument, "--device must be cpu or cuda, got '", o.device, "'");
  }
  config.strategy.device_kind = o.device == "cuda" ? DeviceKind::cuda : DeviceKind::cpu;
  config.strategy.devices = o.devices.value_or(0);
  config.strategy.threads_per_device = o.threads.value_or(0);
  config.strategy.allow_oversubscription = o.allow_oversubscription;
  if (!(o.collective_timeout >= 1.0 && o.collective_timeout <= 86400.0)) {
    TANDEM_THROW(InvalidArgument, "--collective-timeout must be 1 to 86400 seconds, got ",
                 o.collective_timeout);
  }
  config.strategy.comm.timeout =
      std::chrono::milliseconds(static_cast<int64_t>(std::llround(o.collective_timeout * 1000.0)));
  if (!(o.peer_timeout >= 1.0 && o.peer_timeout <= 86400.0)) {
    TANDEM_THROW(InvalidArgument, "--peer-timeout must be 1 to 86400 seconds, got ",
                 o.peer_timeout);
  }
  config.strategy.comm.peer_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(std::llround(o.peer_timeout * 1000.0)));
}

// --prefetch, --input-parallel, --augment (returned: the batch transform
// applies it) and --auto-shard.
data::AugmentOptions configure_input(const RunOptions& o, train::TrainConfig& config) {
  config.prefetch_batches = parse_count_or_auto("--prefetch", o.prefetch, 0);
  config.input_parallel_calls = parse_count_or_auto("--input-parallel", o.input_parallel, 1);
  const data::AugmentOptions augment = data::parse_augment(o.augment);
  if (augment.any()) {
    // fit() seeds thread_generator() per step: the same flips and crops
    // whichever thread builds the batch, and after a resume.
    config.batch_transform = [augment](data::Element batch) {
      batch.set("image", data::augment_images(batch.at("image"), augment, thread_generator()));
      return batch;
    };
  }
  config.auto_shard = data::parse_auto_shard_policy(o.auto_shard);
  return augment;
}

// --model (a model file, FILE.toml, or a built-in name, validated here),
// --model-options and --recompute.
train::ModelFactory model_factory(const RunOptions& o, precision::Policy policy, uint64_t seed,
                                  std::optional<DType> compute_dtype) {
  const bool model_file = is_model_file(o.model);
  if (model_file && !o.model_options.empty()) {
    TANDEM_THROW(InvalidArgument,
                 "--model-options sets a built-in model's sizes; a model file sets its own");
  }
  train::ModelFactory factory =
      model_file ? train::model_from_file(o.model, policy, seed, compute_dtype)
                 : train::builtin_model(o.model, policy, seed, compute_dtype, o.model_options);
  if (o.recompute) {
    // Every replica's blocks keep only their inputs (docs/memory.md).
    factory.build = [build = factory.build, name = factory.spec.name] {
      std::shared_ptr<nn::Module> model = build();
      if (model->recompute_blocks() == 0) {
        TANDEM_THROW(InvalidArgument, "--recompute: model '", name,
                     "' has no block to recompute (Transformer, ResNet or residual blocks)");
      }
      return model;
    };
  }
  return factory;
}

}  // namespace

void add_run_options(CLI::App& app, RunOptions& o) {
  // In the order --help lists them.
  add_model_and_batch_options(app, o);
  add_optimizer_options(app, o);
  add_strategy_options(app, o);
  add_data_options(app, o);
}

RunSetup prepare_run(RunOptions& o) {
  RunSetup setup;
  train::TrainConfig& config = o.config;
  config.strategy.kind = distribute::parse_strategy(o.strategy);
  check_counts(o);
  config.engine.seed = parse_seed(o.seed);
  const precision::Policy policy = precision::parse_policy(o.precision);
  setup.policy = policy;
  const std::optional<DType> compute_dtype =
      o.compute_dtype.empty() ? std::nullopt : std::optional<DType>(parse_dtype(o.compute_dtype));
  config.engine.loss_scale = parse_loss_scale(o.loss_scale, policy);
  configure_optimizer(o, config.engine.optimizer);
  configure_schedule(o, config);
  configure_strategy(o, config);
  configure_batch_and_sharding(o, config);
  configure_update_rule(o, config);
  config.engine.reducer.first_bucket_bytes =
      std::min<int64_t>(config.engine.reducer.bucket_bytes, int64_t{1} << 20);
  config.engine.reducer.wire = comm::parse_wire_dtype(o.wire);
  setup.augment = configure_input(o, config);
  const data::AugmentOptions& augment = setup.augment;
  train::ModelFactory factory = model_factory(o, policy, config.engine.seed, compute_dtype);
  const auto load_start = std::chrono::steady_clock::now();
  setup.data = load_run_data(o, config.engine.seed);
  const RunData& run_data = setup.data;
  setup.load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  config.input_feature = run_data.input;
  config.class_names = run_data.class_names;
  config.padding = run_data.padding;
  configure_objective(o, run_data.label, config);
  if (augment.any() && run_data.input != "image") {
    TANDEM_THROW(InvalidArgument,
                 "--augment works on an input feature named image; this data's "
                 "input is '",
                 run_data.input, "'");
  }
  // Settings that cannot work are named before any data-dependent check.
  train::check_train_config(config);
  setup.config = config;
  setup.model = std::move(factory);
  return setup;
}

int64_t memory_limit_of(const RunOptions& o, int host_replicas) {
  return o.memory_limit.empty() ? train::default_memory_limit(host_replicas)
                                : parse_bytes("--memory-limit", o.memory_limit);
}

uint64_t parse_seed(const std::string& text) {
  const std::optional<uint64_t> value = parse_number<uint64_t>(text);
  if (!value) {
    TANDEM_THROW(InvalidArgument, "--seed must be a whole number from 0 to ",
                 std::numeric_limits<uint64_t>::max(), ", got '", text, "'");
  }
  return *value;
}

}  // namespace tandem::cli
