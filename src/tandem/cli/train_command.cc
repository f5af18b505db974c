// `tandem train`: trains a reference model on Fashion-MNIST, checkpointing
// every epoch and on Ctrl-C, and writes summary.json into the run directory.
#include <unistd.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <limits>
#include <optional>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/random.h"
#include "tandem/cli/commands.h"
#include "tandem/cli/memory_plan_output.h"
#include "tandem/comm/compression.h"
#include "tandem/comm/mpi.h"
#include "tandem/data/augment.h"
#include "tandem/data/dataset.h"
#include "tandem/data/fashion_mnist.h"
#include "tandem/data/input_spec.h"
#include "tandem/distribute/strategy.h"
#include "tandem/interop/torch_state.h"
#include "tandem/kernels/flops.h"
#include "tandem/monitor/monitor.h"
#include "tandem/monitor/progress_view.h"
#include "tandem/nn/models.h"
#include "tandem/optim/optimizer.h"
#include "tandem/precision/policy.h"
#include "tandem/tensor/allocator.h"
#include "tandem/train/memory_plan.h"
#include "tandem/train/summary.h"
#include "tandem/train/trainer.h"

namespace tandem::cli {
namespace {

struct TrainOptions {
  train::TrainConfig config;
  std::string model = "cnn";
  std::string model_options;  // a built-in's settings, "key=value,..."
  std::string precision = "float32";
  std::string compute_dtype;            // empty: the policy's
  std::string loss_scale;               // empty: dynamic under mixed_float16, none otherwise
  std::optional<double> learning_rate;  // unset: optim::default_learning_rate(optimizer)
  std::optional<double> momentum;       // unset: OptimizerConfig's (sgd only)
  std::optional<double> weight_decay;   // unset: the optimizer's default
  std::string seed = "0";               // parsed as uint64, so that -1 is refused
  std::optional<int> threads;           // unset: one per physical core (split between devices)
  std::string strategy = "one-device";
  std::optional<int> devices;  // unset: one per physical core
  bool allow_oversubscription = false;
  double collective_timeout = 300.0;  // seconds
  std::optional<double> bucket_mb;  // unset: 25, or 1 under --zero 2
  std::optional<int64_t> batch_size;        // unset: 128, or derived (--micro-batch-size)
  std::optional<int> accumulate;            // unset: 1, or derived
  std::optional<int64_t> micro_batch_size;  // unset: derived
  int zero = 0;
  bool recompute = false;
  std::string memory_limit;  // bytes per device (K/M/G suffixes); empty: the device's share of RAM
  bool no_memory_plan = false;
  std::string wire = "f32";
  std::string data_dir = data::default_fashion_mnist_dir();
  int64_t train_examples = 0;  // 0: all
  int64_t test_examples = 0;
  std::string data;             // a data specification (or image folder); empty: Fashion-MNIST
  std::string validation_data;  // likewise; empty: Fashion-MNIST's test set, or none
  std::string loss = "softmax_cross_entropy";
  std::optional<double> label_smoothing;  // softmax_cross_entropy; unset: 0
  std::optional<int32_t> ignore_index;
  std::optional<double> huber_delta;  // huber; unset: 1
  std::string metrics;                // empty: accuracy for classification, mae,rmse for regression
  std::string auto_shard = "auto";
  bool quiet = false;
  bool no_monitor = false;
  int64_t metrics_every = 1;
  std::string trace_steps;           // "FIRST:LAST" global steps, or "STEP"
  std::string prefetch = "0";        // batches, or "auto"
  std::string input_parallel = "1";  // batches built at once, or "auto"
  std::string augment = "none";      // data::parse_augment's spec
  std::string tensorboard;           // event files' directory; empty: RUN_DIR/tensorboard
  bool no_tensorboard = false;
  std::string init_from;             // a safetensors file of starting weights
  bool non_strict = false;           // --init-from skips missing and unexpected tensors
};

void print_load_report(const interop::SafetensorsFile& file, const interop::LoadReport& r) {
  fmt::print("  initialised from {}: {} tensors", file.path(), r.loaded.size());
  if (!r.ignored.empty()) fmt::print(", {} BatchNorm batch counters ignored", r.ignored.size());
  fmt::print("\n");
  if (!r.missing.empty()) {
    fmt::print("    not in the file, kept as initialised ({}): {}\n", r.missing.size(),
               fmt::join(r.missing, ", "));
  }
  if (!r.unexpected.empty()) {
    fmt::print("    in the file, not in the model, skipped ({}): {}\n", r.unexpected.size(),
               fmt::join(r.unexpected, ", "));
  }
}

// The trainer a SIGINT should stop; the handler only does an atomic store.
std::atomic<train::Trainer*> interruptible{nullptr};

extern "C" void on_interrupt(int) {
  if (train::Trainer* trainer = interruptible.load()) trainer->request_stop();
  static const char message[] =
      "\ntandem: interrupted, saving a checkpoint (Ctrl-C again to abort)\n";
  [[maybe_unused]] ssize_t written = ::write(STDERR_FILENO, message, sizeof(message) - 1);
}

data::LabeledImages first(const data::LabeledImages& d, int64_t count) {
  if (count <= 0 || count >= d.size()) return d;
  return {d.images.slice(0, count), d.labels.slice(0, count)};
}

std::string default_output_dir(const std::string& model) {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  return (std::filesystem::path("runs") / fmt::format("{}-{}", model, stamp)).string();
}

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

// --trace-steps: "FIRST:LAST" (1-based global steps, inclusive) or one step.
std::pair<int64_t, int64_t> parse_trace_steps(const std::string& text) {
  if (text.empty()) return {0, 0};
  const auto number = [&](const std::string& part) -> int64_t {
    const std::optional<int64_t> value = parse_integer(part);
    if (!value || *value < 1) {
      TANDEM_THROW(InvalidArgument,
                   "--trace-steps must be FIRST:LAST with 1 <= FIRST <= LAST (global steps), got '",
                   text, "'");
    }
    return *value;
  };
  const size_t colon = text.find(':');
  const int64_t first = number(text.substr(0, colon));
  const int64_t last = colon == std::string::npos ? first : number(text.substr(colon + 1));
  if (last < first) {
    TANDEM_THROW(InvalidArgument, "--trace-steps must be FIRST:LAST with FIRST <= LAST, got '",
                 text, "'");
  }
  return {first, last};
}

// A count flag that also takes "auto" (data::kAutotune).
int parse_count_or_auto(const std::string& flag, const std::string& text, int minimum) {
  if (text == "auto") return data::kAutotune;
  const std::optional<int64_t> value = parse_integer(text);
  if (!value || *value < minimum || *value > 1024) {
    TANDEM_THROW(InvalidArgument, flag, " must be a whole number >= ", minimum,
                 " (at most 1024) or 'auto', got '", text, "'");
  }
  return static_cast<int>(*value);
}

// What the run trains and validates on: Fashion-MNIST (the default) or the
// data specifications given with --data and --validation-data.
struct RunData {
  data::Dataset train = data::Dataset::range(0);
  std::optional<data::Dataset> validation;
  std::string description;                     // "Fashion-MNIST, 60000 train / 10000 test examples"
  std::map<std::string, std::string> summary;  // summary.json's config entries
  std::optional<data::PaddedBatchOptions> padding;
  std::string input = "image", label = "label";
  int64_t resident_bytes = 0;  // held in memory for the whole run (the memory plan's input)
};

RunData load_run_data(const TrainOptions& o, uint64_t seed) {
  RunData r;
  if (o.data.empty()) {
    if (!o.validation_data.empty())
      TANDEM_THROW(InvalidArgument, "--validation-data needs --data (the training data)");
    const data::FashionMnist fashion = data::load_fashion_mnist(o.data_dir);
    // --train-examples and --test-examples take views: the whole set stays loaded.
    for (const data::LabeledImages* d : {&fashion.train, &fashion.test})
      r.resident_bytes += static_cast<int64_t>(d->images.nbytes() + d->labels.nbytes());
    const data::LabeledImages train = first(fashion.train, o.train_examples);
    const data::LabeledImages test = first(fashion.test, o.test_examples);
    // Reshuffled every epoch (pass) from the seed.
    r.train = data::as_dataset(train).shuffle(train.size(), seed);
    r.validation = data::as_dataset(test);
    r.description =
        fmt::format("Fashion-MNIST, {} train / {} test examples", train.size(), test.size());
    r.summary = {{"data_dir", o.data_dir},
                 {"train_examples", std::to_string(train.size())},
                 {"test_examples", std::to_string(test.size())}};
    return r;
  }
  if (o.train_examples != 0 || o.test_examples != 0) {
    TANDEM_THROW(InvalidArgument,
                 "--train-examples and --test-examples select Fashion-MNIST examples; with "
                 "--data, limit the data in its specification or with --steps-per-epoch");
  }
  const data::InputSpec spec = data::read_input_spec(o.data);
  r.train = data::make_input(spec, seed);
  r.input = spec.input;
  r.label = spec.label;
  if (spec.needs_padding()) r.padding = spec.padding();
  const int64_t examples = r.train.cardinality();
  r.description = fmt::format("{} ({}{})", o.data, spec.format,
                              examples >= 0 ? fmt::format(", {} examples", examples) : "");
  r.summary = {{"data", std::filesystem::absolute(o.data).string()}};
  if (!o.validation_data.empty()) {
    data::InputSpec v = data::read_input_spec(o.validation_data);
    if (v.input != spec.input || v.label != spec.label) {
      TANDEM_THROW(InvalidArgument, "--validation-data '", o.validation_data, "' names input '",
                   v.input, "' and label '", v.label, "' but --data names '", spec.input, "' and '",
                   spec.label, "'");
    }
    v.shuffle = 0;
    r.validation = data::make_input(v, seed);
    const int64_t n = r.validation->cardinality();
    r.description += fmt::format(", validation {}{}", o.validation_data,
                                 n >= 0 ? fmt::format(" ({} examples)", n) : "");
    r.summary["validation_data"] = std::filesystem::absolute(o.validation_data).string();
  }
  return r;
}

// --loss and its options, --metrics (default: accuracy for a classifier,
// mae and rmse for a regression) against the data's label feature.
void configure_objective(const TrainOptions& o, const std::string& label,
                         train::TrainConfig& config) {
  if (o.label_smoothing) {
    if (!(*o.label_smoothing >= 0.0 && *o.label_smoothing < 1.0)) {
      TANDEM_THROW(InvalidArgument, "--label-smoothing must be in [0, 1), got ",
                   *o.label_smoothing);
    }
    if (o.loss != "softmax_cross_entropy") {
      TANDEM_THROW(InvalidArgument,
                   "--label-smoothing applies to --loss softmax_cross_entropy, not ", o.loss);
    }
  }
  if (o.huber_delta) {
    if (!(*o.huber_delta > 0.0) || !std::isfinite(*o.huber_delta))
      TANDEM_THROW(InvalidArgument, "--huber-delta must be positive and finite, got ",
                   *o.huber_delta);
    if (o.loss != "huber")
      TANDEM_THROW(InvalidArgument, "--huber-delta applies to --loss huber, not ", o.loss);
  }
  config.loss = train::make_loss(o.loss, {.labels = label,
                                          .ignore_index = o.ignore_index,
                                          .label_smoothing = o.label_smoothing.value_or(0.0),
                                          .delta = o.huber_delta.value_or(1.0)});
  std::vector<std::string> names = split_list(o.metrics);
  if (o.metrics.empty()) {
    if (o.loss == "softmax_cross_entropy") names = {"accuracy"};
    if (o.loss == "mean_squared_error" || o.loss == "mean_absolute_error" || o.loss == "huber")
      names = {"mae", "rmse"};
  }
  config.metrics.clear();
  if (o.metrics == "none") return;
  for (const std::string& name : names)
    config.metrics.push_back(
        train::make_metric(name, {.labels = label, .ignore_index = o.ignore_index}));
}

// The model's forward FLOPs by layer for one example of the data (none when
// the input is neither floating nor i32 tokens).
std::vector<monitor::LayerFlops> example_layer_flops(nn::Module& model,
                                                     const std::optional<data::Element>& example,
                                                     const std::string& input) {
  if (!example || !example->has(input)) return {};
  const DType dtype = example->at(input).dtype();
  if (!is_floating(dtype) && dtype != DType::i32) return {};
  try {
    return monitor::layer_flops(model, example->at(input).shape(), dtype);
  } catch (const Error&) {
    return {};  // the figure is a diagnostic; training reports real shape errors
  }
}

// Under mpirun every process runs this command: without multi-worker each
// would train on its own and write the same run directory (one process is
// just a training).
void check_launcher(const TrainOptions& o, const std::string& strategy) {
  if (strategy == "multi_worker") return;
  const int processes = comm::launched_process_count();
  if (processes == 0 || processes == 1) return;
  TANDEM_THROW(InvalidArgument, "tandem train was started by mpirun with ",
               processes > 1 ? fmt::format("{} processes", processes) : "several processes",
               " and --strategy ", o.strategy,
               ": each process would train on its own and write the same run directory; add "
               "--strategy multi-worker");
}

// --seed as an unsigned 64-bit number: a negative one is refused instead of
// wrapping around.
uint64_t parse_seed(const std::string& text) {
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    TANDEM_THROW(InvalidArgument, "--seed must be a whole number from 0 to ",
                 std::numeric_limits<uint64_t>::max(), ", got '", text, "'");
  }
  return value;
}

// Counts where 0 or a negative number would be silently taken for something else.
void check_counts(const TrainOptions& o) {
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

// --optimizer and its flags. Without --lr the optimizer's own default
// (0.05 for sgd, 1e-3 for adam and adamw); momentum and Nesterov are SGD's.
void configure_optimizer(const TrainOptions& o, optim::OptimizerConfig& c) {
  const double default_lr = optim::default_learning_rate(c.name);  // refuses unknown names
  if (o.learning_rate && (!(*o.learning_rate > 0.0) || !std::isfinite(*o.learning_rate)))
    TANDEM_THROW(InvalidArgument, "--lr must be positive and finite, got ", *o.learning_rate);
  c.learning_rate = o.learning_rate.value_or(default_lr);
  if (c.name != "sgd" && (o.momentum || c.nesterov)) {
    TANDEM_THROW(InvalidArgument, o.momentum ? "--momentum" : "--nesterov",
                 " applies to --optimizer sgd, not ", c.name);
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

// --augment against the data's first example: a crop padding as large as
// the images shifts them out entirely.
void check_augment_fits(const data::AugmentOptions& augment,
                        const std::optional<data::Element>& example) {
  if (!augment.any() || !example || !example->has("image")) return;
  const Tensor& image = example->at("image");
  if (image.rank() != 3) {
    TANDEM_THROW(InvalidArgument,
                 "--augment works on images shaped (height, width, channels); this data's image "
                 "is ",
                 image.shape().to_string());
  }
  try {
    data::check_augment(augment, image.dim(0), image.dim(1));
  } catch (const InvalidArgument& e) {
    TANDEM_THROW(InvalidArgument, "--augment: ", e.what());
  }
}

// --trace-steps against the run's steps, when the data's size is known: a
// window after the last step (or before a resumed run's first) records nothing.
void check_trace_window(const std::string& text, int64_t first, int64_t last,
                        int64_t steps_per_epoch, int64_t epochs, int64_t resumed_at) {
  if (first == 0) return;
  const int64_t total = steps_per_epoch * epochs;
  if (steps_per_epoch > 0 && first > total) {
    TANDEM_THROW(InvalidArgument, "--trace-steps ", text,
                 " starts after the run's last step: it has ", total, " steps (", steps_per_epoch,
                 " per epoch x ", epochs, " epoch(s))");
  }
  if (last <= resumed_at) {
    TANDEM_THROW(InvalidArgument, "--trace-steps ", text, " ends before step ", resumed_at + 1,
                 ", where this resumed run starts");
  }
}

// --batch-size, --accumulate and --micro-batch-size (any two determine the
// third; the Trainer derives the missing one once it knows the replica
// count), --zero and the bucket size that goes with it.
void configure_batch_and_sharding(const TrainOptions& o, train::TrainConfig& config) {
  const auto at_least_one = [](const char* flag, auto value) {
    if (value < 1) TANDEM_THROW(InvalidArgument, flag, " must be at least 1, got ", value);
  };
  if (o.batch_size) at_least_one("--batch-size", *o.batch_size);
  if (o.accumulate) at_least_one("--accumulate", *o.accumulate);
  if (o.micro_batch_size) at_least_one("--micro-batch-size", *o.micro_batch_size);
  if (o.micro_batch_size) {
    config.micro_batch_size = *o.micro_batch_size;
    config.batch_size = o.batch_size.value_or(0);
    config.accumulation_steps = o.accumulate.value_or(o.batch_size ? 0 : 1);
  } else {
    config.batch_size = o.batch_size.value_or(128);
    config.accumulation_steps = o.accumulate.value_or(1);
  }
  if (o.zero == 3) {
    TANDEM_THROW(InvalidArgument,
                 "--zero 3 (parameters sharded too, gathered layer by layer) is not offered; "
                 "--zero 1 shards the optimizer state, --zero 2 also the gradients");
  }
  if (o.zero < 0 || o.zero > 2)
    TANDEM_THROW(InvalidArgument, "--zero must be 0 (off), 1 or 2, got ", o.zero);
  config.reducer.zero_stage = o.zero;
  // ZeRO-2 stages buckets through three buffers of the largest bucket:
  // small buckets keep that below the gradients it saves (docs/memory.md).
  const double bucket_mb = o.bucket_mb.value_or(o.zero == 2 ? 1.0 : 25.0);  // checked by check_counts
  config.reducer.bucket_bytes = static_cast<int64_t>(bucket_mb * (1 << 20));
}

int run_train(TrainOptions& o) {
  train::TrainConfig& config = o.config;
  config.strategy.name = o.strategy;
  std::replace(config.strategy.name.begin(), config.strategy.name.end(), '-', '_');
  check_launcher(o, config.strategy.name);
  check_counts(o);
  config.seed = parse_seed(o.seed);
  const precision::Policy policy = precision::parse_policy(o.precision);
  const std::optional<DType> compute_dtype =
      o.compute_dtype.empty() ? std::nullopt : std::optional<DType>(parse_dtype(o.compute_dtype));
  config.loss_scale = parse_loss_scale(o.loss_scale, policy);
  configure_optimizer(o, config.optimizer);
  config.strategy.devices = o.devices.value_or(0);
  config.strategy.threads_per_device = o.threads.value_or(0);
  config.strategy.allow_oversubscription = o.allow_oversubscription;
  if (!(o.collective_timeout >= 1.0 && o.collective_timeout <= 86400.0)) {
    TANDEM_THROW(InvalidArgument, "--collective-timeout must be 1 to 86400 seconds, got ",
                 o.collective_timeout);
  }
  config.strategy.comm.timeout =
      std::chrono::milliseconds(static_cast<int64_t>(std::llround(o.collective_timeout * 1000.0)));
  configure_batch_and_sharding(o, config);
  config.reducer.first_bucket_bytes =
      std::min<int64_t>(config.reducer.bucket_bytes, int64_t{1} << 20);
  config.reducer.wire = comm::parse_wire_dtype(o.wire);
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
  if (config.resume && config.output_dir.empty())
    TANDEM_THROW(InvalidArgument, "--resume needs --output, the run directory to continue");
  if (config.output_dir.empty())
    config.output_dir = default_output_dir(std::filesystem::path(o.model).stem().string());
  const auto [trace_first, trace_last] = parse_trace_steps(o.trace_steps);
  if (o.metrics_every < 1)
    TANDEM_THROW(InvalidArgument, "--metrics-every must be at least 1, got ", o.metrics_every);
  if (o.no_monitor && trace_first > 0)
    TANDEM_THROW(InvalidArgument, "--trace-steps needs the monitor; drop --no-monitor");
  if (!o.tensorboard.empty() && (o.no_monitor || o.no_tensorboard)) {
    TANDEM_THROW(InvalidArgument, "--tensorboard writes the monitor's figures; drop ",
                 o.no_monitor ? "--no-monitor" : "--no-tensorboard");
  }
  // Event files by default in the run directory, as Keras's TensorBoard callback's log_dir.
  const std::string tensorboard =
      o.no_tensorboard ? std::string()
      : o.tensorboard.empty()
          ? (std::filesystem::path(config.output_dir) / "tensorboard").string()
          : o.tensorboard;
  config.auto_shard = data::parse_auto_shard_policy(o.auto_shard);
  // A model file (FILE.toml), or a built-in name (validated here).
  const bool model_file = o.model.ends_with(".toml") || std::filesystem::is_regular_file(o.model);
  if (model_file && !o.model_options.empty()) {
    TANDEM_THROW(InvalidArgument,
                 "--model-options sets a built-in model's sizes; a model file sets its own");
  }
  train::ModelFactory factory =
      model_file ? train::model_from_file(o.model, policy, config.seed, compute_dtype)
                 : train::builtin_model(o.model, policy, config.seed, compute_dtype,
                                        o.model_options);
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
  if (o.non_strict && o.init_from.empty())
    TANDEM_THROW(InvalidArgument, "--non-strict applies to --init-from; give the weights file");
  if (!o.init_from.empty() && config.resume) {
    TANDEM_THROW(InvalidArgument,
                 "--init-from starts a run from weights and --resume continues one from its "
                 "checkpoint; give one of them");
  }
  // Opened (its header checked) before the data loads, so that a bad file fails fast.
  std::optional<interop::SafetensorsFile> init_weights;
  if (!o.init_from.empty()) init_weights.emplace(o.init_from);
  const auto load_start = std::chrono::steady_clock::now();
  const RunData run_data = load_run_data(o, config.seed);
  const double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  config.input_feature = run_data.input;
  config.padding = run_data.padding;
  configure_objective(o, run_data.label, config);
  if (augment.any() && run_data.input != "image") {
    TANDEM_THROW(InvalidArgument,
                 "--augment works on an input feature named image; this data's "
                 "input is '",
                 run_data.input, "'");
  }
  const data::Dataset& train_set = run_data.train;

  train::Trainer trainer(config, factory);
  distribute::Strategy& strategy = trainer.strategy();
  const bool chief = strategy.is_chief();
  // The batch sizes the Trainer derived (global, accumulation, micro-batch).
  config.batch_size = trainer.config().batch_size;
  config.accumulation_steps = trainer.config().accumulation_steps;
  config.micro_batch_size = trainer.config().micro_batch_size;
  if (chief && o.zero > 0 && strategy.global_replicas() == 1 && !o.quiet) {
    fmt::print(stderr, "tandem: warning: --zero {} with one replica: nothing to shard, the "
               "optimizer state and gradients stay whole\n", o.zero);
  }
  // The first training example, for the checks of --augment, the memory
  // plan and the monitor's FLOP figures.
  const std::optional<data::Element> example = train_set.take(1).iterator().next();
  check_augment_fits(augment, example);
  // Each device's predicted peak, refused before training when over the limit.
  std::optional<train::MemoryPlan> plan;
  const int64_t memory_limit = o.memory_limit.empty()
                                   ? train::default_memory_limit(strategy.local_replicas())
                                   : parse_bytes("--memory-limit", o.memory_limit);
  if (example && !o.no_memory_plan) {
    plan = train::plan_memory({.model = factory,
                               .config = trainer.config(),
                               .layout = {.local_replicas = strategy.local_replicas(),
                                          .global_replicas = strategy.global_replicas(),
                                          .threads_per_replica = strategy.threads_per_replica()},
                               .example = *example,
                               .evaluates = run_data.validation.has_value(),
                               .validation_examples =
                                   run_data.validation ? run_data.validation->cardinality() : -1,
                               .resident_input_bytes = run_data.resident_bytes,
                               .writes_checkpoints = true,
                               .chief = chief});
    train::check_memory_limit(*plan, memory_limit);
  }
  const int64_t steps_per_epoch = trainer.steps_per_epoch(train_set);
  std::optional<interop::LoadReport> init_report;
  if (init_weights)
    init_report = interop::load_safetensors(*init_weights, trainer, {.strict = !o.non_strict});
  // A resume is checked (the checkpoint read) before the monitor appends to
  // the run directory, so a failed one leaves it as it was.
  int64_t resumed_at = 0;
  if (config.resume) {
    const train::ResumePoint& point = trainer.prepare_resume();
    resumed_at = point.global_step;
    if (chief && config.schedule == "cosine" && point.epochs > 0 && point.epochs != config.epochs) {
      fmt::print(stderr,
                 "tandem: warning: the run was started for {} epoch(s) and now trains {}: the "
                 "cosine schedule is {} over the new total, so the learning rate from step {} on "
                 "does not continue the curve the run started on\n",
                 point.epochs, config.epochs,
                 config.epochs > point.epochs ? "stretched" : "compressed", point.global_step + 1);
    }
  }
  check_trace_window(o.trace_steps, trace_first, trace_last, steps_per_epoch, config.epochs,
                     resumed_at);
  if (!o.quiet && chief) {
    fmt::print("tandem train: {} ({} parameters) on {} (loaded in {:.1f} s)\n", factory.spec.name,
               trainer.model().parameter_count(), run_data.description, load_seconds);
    fmt::print(
        "  strategy {}: {} replica(s) ({} in this process) x {} thread(s), precision {} ({} "
        "matmul{}), global batch {}{}{}, {} lr {} ({}), {} epoch(s)\n",
        strategy.name(), strategy.global_replicas(), strategy.local_replicas(),
        strategy.threads_per_replica(), precision::policy_name(policy),
        dtype_name(factory.spec.compute_dtype),
        config.loss_scale
            ? (config.loss_scale->dynamic ? ", dynamic loss scale" : ", fixed loss scale")
            : "",
        config.batch_size,
        config.accumulation_steps > 1
            ? fmt::format(" ({} micro-batches of {} per replica)", config.accumulation_steps,
                          config.micro_batch_size)
            : std::string(),
        config.reducer.zero_stage > 0 ? fmt::format(", ZeRO-{}", config.reducer.zero_stage)
                                      : std::string(),
        config.optimizer.name, config.optimizer.learning_rate, config.schedule, config.epochs);
    if (augment.any() || config.prefetch_batches != 0 || config.input_parallel_calls != 1) {
      const auto setting = [](int v) {
        return v == data::kAutotune ? std::string("auto") : std::to_string(v);
      };
      fmt::print("  input: augment {}, batches built at once {}, prefetch {}\n",
                 data::augment_spec(augment), setting(config.input_parallel_calls),
                 setting(config.prefetch_batches));
    }
    if (plan) fmt::print("{}", describe_plan(*plan, memory_limit));
    fmt::print("  output {}\n", config.output_dir);
    if (init_report) print_load_report(*init_weights, *init_report);
  }
  // The monitor (metrics.jsonl, trace, findings) runs on the chief, which
  // writes the run directory.
  std::unique_ptr<monitor::Monitor> run_monitor;
  if (chief && !o.no_monitor) {
    monitor::RunInfo info = monitor::describe_run(trainer, steps_per_epoch);
    info.layers = example_layer_flops(trainer.model(), example, config.input_feature);
    info.device_memory_bytes = cpu_info().memory_bytes / strategy.local_replicas();
    {
      // The device's peak for the utilisation figure: a short matmul run with
      // one replica's threads in the policy's matrix dtype.
      NumThreadsScope threads(strategy.threads_per_replica());
      info.peak_flops_per_device = kernels::measure_matmul_peak(
          factory.spec.compute_dtype == DType::bf16 ? DType::bf16 : DType::f32, 1024, 0.2);
      // The measurement's buffers are gone; peaks should be the model's.
      for (const Device& d : info.devices) allocator_for(d).reset_peaks();
    }
    if (!o.quiet) {
      double forward = 0.0;
      for (const monitor::LayerFlops& l : info.layers) forward += l.forward_flops;
      fmt::print(
          "  monitor: {:.2f} MFLOP per example forward, device peak {:.0f} GFLOP/s ({}), "
          "metrics.jsonl{}\n",
          forward / 1e6, info.peak_flops_per_device / 1e9,
          factory.spec.compute_dtype == DType::bf16 ? "bf16" : "f32",
          trace_first > 0 ? fmt::format(", trace of steps {}-{}", trace_first, trace_last)
                          : std::string());
    }
    run_monitor =
        std::make_unique<monitor::Monitor>(monitor::MonitorOptions{.run_dir = config.output_dir,
                                                                   .append = config.resume,
                                                                   .metrics_every = o.metrics_every,
                                                                   .trace_first = trace_first,
                                                                   .trace_last = trace_last,
                                                                   .tensorboard_dir = tensorboard},
                                           std::move(info));
  }
  const monitor::ProgressMode mode = o.quiet || !chief              ? monitor::ProgressMode::quiet
                                     : ::isatty(STDOUT_FILENO) != 0 ? monitor::ProgressMode::bar
                                                                    : monitor::ProgressMode::lines;
  monitor::ProgressView view(mode, config.epochs, config.loss_scale.has_value(), run_monitor.get());
  train::TrainCallbacks callbacks;
  callbacks.on_step = [&](const train::StepInfo& s) {
    if (run_monitor) run_monitor->on_step(s);
    view.on_step(s);
  };
  callbacks.on_epoch = [&](const train::EpochResult& e) {
    if (run_monitor) run_monitor->on_epoch(e);
    view.on_epoch(e);
  };

  struct sigaction action = {};
  action.sa_handler = on_interrupt;
  action.sa_flags = SA_RESETHAND;  // a second Ctrl-C terminates
  sigemptyset(&action.sa_mask);
  struct sigaction previous = {};
  interruptible.store(&trainer);
  sigaction(SIGINT, &action, &previous);
  train::TrainResult result;
  try {
    // The memory plan's measured side: the high-water marks from here on.
    for (int r = 0; r < strategy.local_replicas(); ++r)
      allocator_for(strategy.device(r)).reset_high_water();
    result = trainer.fit(train_set, run_data.validation, callbacks);
  } catch (...) {
    interruptible.store(nullptr);
    sigaction(SIGINT, &previous, nullptr);
    throw;
  }
  interruptible.store(nullptr);
  sigaction(SIGINT, &previous, nullptr);

  const std::string summary_path =
      (std::filesystem::path(config.output_dir) / "summary.json").string();
  if (!chief) return result.interrupted ? 130 : 0;
  std::map<std::string, std::string> sections;
  if (run_monitor) {
    run_monitor->finish();
    for (const std::string& w : run_monitor->warnings())
      fmt::print(stderr, "tandem: warning: {}\n", w);
    sections["monitor"] = run_monitor->summary_json();
  }
  if (plan) sections["memory_plan"] = plan_json(*plan, memory_limit, /*measured=*/true);
  std::map<std::string, std::string> extra = run_data.summary;
  extra["strategy"] = strategy.name();
  extra["replicas"] = std::to_string(strategy.global_replicas());
  extra["threads_per_replica"] = std::to_string(strategy.threads_per_replica());
  extra["augment"] = data::augment_spec(augment);
  extra["recompute"] = o.recompute ? "true" : "false";
  train::write_summary(summary_path, config, factory.spec, result, extra, sections);
  if (result.interrupted) {
    fmt::print("stopped; checkpoint saved to {} (continue with --output {} --resume)\n",
               trainer.checkpoint_path(), config.output_dir);
    return 130;
  }
  if (!o.quiet && !result.history.empty()) {
    const auto& last = result.history.back();
    const std::vector<std::pair<std::string, double>>& final_metrics =
        run_data.validation ? last.validation_metrics : last.train_metrics;
    std::string figures =
        fmt::format("{} loss {:.4f}", run_data.validation ? "validation" : "train",
                    run_data.validation ? last.validation_loss : last.train_loss);
    for (const auto& [name, value] : final_metrics) {
      figures += name.ends_with("accuracy") ? fmt::format(", {} {:.2f}%", name, 100.0 * value)
                                            : fmt::format(", {} {:.4g}", name, value);
    }
    if (result.input_exhausted)
      fmt::print(stderr,
                 "tandem: warning: the training data ran out before the last epoch ended\n");
    fmt::print("done: {}, {:.1f} s; summary in {}\n", figures, result.wall_seconds, summary_path);
    if (run_monitor) {
      for (const monitor::Finding& f : run_monitor->stats().diagnose())
        fmt::print("  {}\n", f.message);
      fmt::print("  charts and findings: tandem report {}\n", config.output_dir);
    }
  }
  return 0;
}

}  // namespace

Command add_train_command(CLI::App& app) {
  CLI::App* command =
      app.add_subcommand("train",
                         "Train a model (built-in or from a file) on Fashion-MNIST or "
                         "on data described by --data");
  auto o = std::make_shared<TrainOptions>();
  train::TrainConfig& c = o->config;
  command
      ->add_option("--model", o->model,
                   "Model: cnn, mlp, gpt, resnet, or a model file (FILE.toml, docs/model_files.md)")
      ->capture_default_str();
  command->add_option("--model-options", o->model_options,
                      "A built-in model's settings, KEY=VALUE,... (gpt: layers, width, heads, "
                      "context, vocabulary, mlp_ratio, dropout; resnet: depth, width, channels, "
                      "classes, sync_bn)");
  command->add_option("--epochs", c.epochs, "Epochs to train")->capture_default_str();
  command->add_option("--batch-size,--batch", o->batch_size,
                      "Global batch size (default: 128, or micro-batch x accumulation steps x "
                      "replicas with --micro-batch-size)");
  command->add_option("--accumulate", o->accumulate,
                      "Gradient accumulation: micro-batches per step, whose gradients make one "
                      "update (default: 1, or global / (micro-batch x replicas))");
  command->add_option("--micro-batch-size", o->micro_batch_size,
                      "Examples per replica per micro-batch (default: global / (replicas x "
                      "accumulation steps)); any two of the three batch settings fix the third");
  command->add_flag("--recompute", o->recompute,
                    "Activation recomputation: every Transformer, ResNet or residual block keeps "
                    "only its input and computes its inside again in backward (docs/memory.md)");
  command->add_option("--memory-limit", o->memory_limit,
                      "Bytes per device a run may use (suffix K, M, G or T: powers of 1024; "
                      "default: physical memory / devices); a run predicted to need more is "
                      "refused before training");
  command->add_flag("--no-memory-plan", o->no_memory_plan,
                    "Skip the memory plan (and the --memory-limit check) before training");
  command->add_option("--zero", o->zero,
                      "ZeRO sharding across replicas: 0 off, 1 optimizer state, 2 optimizer state "
                      "and gradients (docs/memory.md)")
      ->capture_default_str();
  command->add_option("--eval-batch-size", c.eval_batch_size, "Batch size for evaluation")
      ->capture_default_str();
  command->add_flag("--drop-remainder", c.drop_remainder,
                    "Skip the last partial batch of each epoch (default: train on it)");
  command->add_option("--optimizer", c.optimizer.name, "sgd, adam or adamw")->capture_default_str();
  command->add_option("--lr", o->learning_rate,
                      "Learning rate (default: 0.05 for sgd, 0.001 for adam and adamw)");
  command->add_option("--momentum", o->momentum, "SGD momentum in [0, 1) (default: 0.9)");
  command->add_flag("--nesterov", c.optimizer.nesterov, "Nesterov momentum (SGD)");
  command->add_option("--weight-decay", o->weight_decay,
                      "Weight decay, >= 0 (default: 0, or 0.01 for adamw)");
  command->add_option("--clip-norm", c.optimizer.global_clip_norm,
                      "Clip the gradients to this global L2 norm before each update (Keras's "
                      "global_clipnorm; after the all-reduce; 0: off)")
      ->capture_default_str();
  command->add_option("--schedule", c.schedule, "Learning-rate schedule: constant, step or cosine")
      ->capture_default_str();
  command
      ->add_option("--lr-step-epochs", c.lr_step_epochs,
                   "Step schedule: epochs between decays (> 0)")
      ->capture_default_str();
  command->add_option("--lr-gamma", c.lr_gamma, "Step schedule: decay factor in (0, 1]")
      ->capture_default_str();
  command->add_option("--min-lr", c.min_lr, "Cosine schedule: final learning rate, from 0 to --lr")
      ->capture_default_str();
  command
      ->add_option("--warmup-epochs", c.warmup_epochs,
                   "Linear warm-up length in epochs, from 0 to --epochs")
      ->capture_default_str();
  command
      ->add_option("--seed", o->seed,
                   "Seed for initialisation, shuffling and dropout (0 to 2^64 - 1)")
      ->capture_default_str();
  command->add_option("--threads", o->threads,
                      "Intra-op threads per device (default: physical cores / devices)");
  command
      ->add_option("--strategy", o->strategy, "one-device, mirrored or multi-worker (under mpirun)")
      ->capture_default_str();
  command->add_option("--devices", o->devices,
                      "Replicas (virtual CPU devices) in this process, at least 1 (default: one "
                      "per physical core)");
  command->add_flag("--allow-oversubscription", o->allow_oversubscription,
                    "Allow more devices x threads than physical cores (one device included)");
  command
      ->add_option("--collective-timeout", o->collective_timeout,
                   "Seconds a collective waits for the other replicas before the run ends with a "
                   "stall report naming the ranks that did not answer (1 to 86400)")
      ->capture_default_str();
  command->add_option("--bucket-mb", o->bucket_mb,
                      "Gradient fusion bucket size in MiB (> 0; default: 25, 1 with --zero 2)");
  command->add_option("--wire", o->wire, "Gradient all-reduce wire dtype: f32, bf16 or f16")
      ->capture_default_str();
  command
      ->add_option("--precision", o->precision,
                   "Mixed-precision policy: float32, mixed_bfloat16 or mixed_float16")
      ->capture_default_str();
  command->add_option("--loss-scale", o->loss_scale,
                      "Loss scaling: dynamic, none or a fixed number (default: dynamic under "
                      "mixed_float16, none otherwise)");
  command->add_option("--compute-dtype", o->compute_dtype,
                      "Override the matmul/conv dtype: f32 or bf16 (default: the policy's)");
  command->add_option("--data", o->data,
                      "Training data: a data specification (TOML, docs/training.md) or a folder "
                      "of images with one sub-folder per class (default: Fashion-MNIST)");
  command->add_option("--validation-data", o->validation_data,
                      "Validation data, described like --data (default: Fashion-MNIST's test set "
                      "without --data, none with it)");
  command
      ->add_option("--loss", o->loss,
                   "softmax_cross_entropy, binary_cross_entropy, mean_squared_error, "
                   "mean_absolute_error or huber")
      ->capture_default_str();
  command->add_option("--label-smoothing", o->label_smoothing,
                      "softmax_cross_entropy: label smoothing in [0, 1) (default: 0)");
  command->add_option("--ignore-index", o->ignore_index,
                      "softmax_cross_entropy and metrics: a label value left out");
  command->add_option("--huber-delta", o->huber_delta, "huber: the delta, > 0 (default: 1)");
  command->add_option("--metrics", o->metrics,
                      "Comma-separated: accuracy, topK_accuracy, mae, rmse, perplexity, bits_per_byte, or none "
                      "(default: accuracy for softmax_cross_entropy, mae,rmse for regression)");
  command
      ->add_option("--steps-per-epoch", c.steps_per_epoch,
                   "Steps per epoch from one pass over the data (0: an epoch is a pass)")
      ->capture_default_str();
  command
      ->add_option("--auto-shard", o->auto_shard,
                   "Multi-worker input sharding: auto, file, data or off")
      ->capture_default_str();
  command->add_option("--data-dir", o->data_dir, "Directory with the Fashion-MNIST IDX files")
      ->capture_default_str();
  command->add_option("--train-examples", o->train_examples,
                      "Use only the first N Fashion-MNIST training examples (0, the default: all)");
  command->add_option("--test-examples", o->test_examples,
                      "Use only the first N Fashion-MNIST test examples (0, the default: all)");
  command->add_option("--output,-o", c.output_dir, "Run directory (default: runs/MODEL-TIMESTAMP)");
  command->add_flag("--resume", c.resume,
                    "Continue from the checkpoint in --output (a cosine schedule is stretched "
                    "over a new --epochs)");
  command->add_option("--tensorboard", o->tensorboard,
                      "TensorBoard event files' directory (default: RUN_DIR/tensorboard)");
  command->add_flag("--no-tensorboard", o->no_tensorboard, "Write no TensorBoard event files");
  command->add_option("--init-from", o->init_from,
                      "Start from the weights of a safetensors file (PyTorch names and layouts; "
                      "docs/interop.md)");
  command->add_flag("--non-strict", o->non_strict,
                    "With --init-from: skip tensors the file lacks or the model does not have "
                    "(shapes must still match)");
  command->add_flag("--quiet,-q", o->quiet, "Print nothing but errors");
  command->add_flag("--no-monitor", o->no_monitor,
                    "Skip metrics.jsonl, memory snapshots and findings (the summary keeps the "
                    "run's results)");
  command
      ->add_option("--metrics-every", o->metrics_every,
                   "Write a metrics.jsonl line every N steps (epoch lines always)")
      ->capture_default_str();
  command
      ->add_option("--prefetch", o->prefetch,
                   "Batches assembled ahead on a background thread (0: when the step starts; "
                   "auto: grown while steps wait)")
      ->capture_default_str();
  command
      ->add_option("--input-parallel", o->input_parallel,
                   "Batches assembled at once on the data pool (auto: grown while steps wait)")
      ->capture_default_str();
  command
      ->add_option("--augment", o->augment,
                   "Random augmentation of training batches: none, flip, crop:PIXELS, or a "
                   "comma-separated list (flip,crop:2)")
      ->capture_default_str();
  command->add_option("--trace-steps", o->trace_steps,
                      "Record a Chrome trace (trace.json) of global steps FIRST:LAST (FIRST at "
                      "most the run's last step)");
  return {command, [o]() { return run_train(*o); }};
}

}  // namespace tandem::cli
