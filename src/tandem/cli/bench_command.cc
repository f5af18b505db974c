// `tandem bench ...`: measurements. `bench train` times training steps of the
// reference models for each (model, precision policy, threads) variant, interleaving the
// variants within every repeat so that machine noise hits them alike, and
// reports the median with its spread.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/statistics.h"
#include "tandem/cli/commands.h"
#include "tandem/kernels/backend_info.h"
#include "tandem/precision/policy.h"
#include "tandem/train/throughput.h"

namespace tandem::cli {
namespace {

struct BenchTrainOptions {
  std::string models = "cnn,mlp";
  std::string model_options;  // for every model that takes settings
  std::string precisions = "float32,mixed_bfloat16";
  std::string threads = "";  // default: 1 and the physical core count
  std::string device = "cpu";
  int64_t batch_size = 128;
  int64_t steps = 30;
  int64_t warmup = 5;
  int repeats = 5;
  std::string optimizer;  // empty: each model's recipe (ThroughputOptions::optimizer)
  bool json = false;
};

int parse_threads(const std::string& text) {
  try {
    size_t used = 0;
    const int value = std::stoi(text, &used);
    if (used == text.size() && value >= 1) return value;
  } catch (const std::exception&) {
  }
  TANDEM_THROW(InvalidArgument, "--threads: '", text, "' is not a positive thread count");
}

// One measured configuration of `bench train` and its samples.
struct Variant {
  std::string model;
  precision::Policy policy;
  int threads;
  std::vector<double> samples;
  int64_t peak_activation_bytes = 0;
  int64_t tokens_per_example = 1;
  double model_flops_per_example = 0.0;
  std::string optimizer;
};

// --threads' distinct counts (default 1 and the physical cores); GPUs take none.
std::vector<int> thread_counts(const BenchTrainOptions& o, Device device) {
  if (device.kind != DeviceKind::cpu && !o.threads.empty()) {
    TANDEM_THROW(InvalidArgument, "--threads applies to CPU devices, not ", device.to_string());
  }
  const std::string text = device.kind != DeviceKind::cpu ? "1"
                           : o.threads.empty()
                               ? fmt::format("1,{}", std::max(1, cpu_info().physical_cores))
                               : o.threads;
  std::vector<int> counts;
  for (const auto& t : split_list(text)) {
    const int n = parse_threads(t);
    if (std::find(counts.begin(), counts.end(), n) == counts.end()) counts.push_back(n);
  }
  return counts;
}

void print_train_json(const BenchTrainOptions& o, Device device,
                      const std::vector<Variant>& variants) {
  nlohmann::json rows = nlohmann::json::array();
  for (const Variant& v : variants) {
    rows.push_back(
        {{"model", v.model},
         {"precision", std::string(precision::policy_name(v.policy))},
         {"threads", v.threads},
         {"batch_size", o.batch_size},
         {"examples_per_second_median", median(v.samples)},
         {"examples_per_second_min", *std::min_element(v.samples.begin(), v.samples.end())},
         {"examples_per_second_max", *std::max_element(v.samples.begin(), v.samples.end())},
         {"samples", v.samples},
         {"tokens_per_second_median",
          median(v.samples) * static_cast<double>(v.tokens_per_example)},
         {"model_flops_per_example", v.model_flops_per_example},
         {"model_gflops_per_second_median", median(v.samples) * v.model_flops_per_example / 1e9},
         {"peak_activation_bytes", v.peak_activation_bytes},
         {"optimizer", v.optimizer}});
  }
  nlohmann::json out = {{"bench", "train"},
                        {"device", device.to_string()},
                        {"cpu", cpu_info().model_name},
                        {"onednn_isa", kernels::backend_info().cpu_isa},
                        {"steps", o.steps},
                        {"repeats", o.repeats},
                        {"results", rows}};
  fmt::print("{}\n", out.dump(2));
}

void print_train_table(const BenchTrainOptions& o, Device device,
                       const std::vector<Variant>& variants) {
  fmt::print(
      "training throughput on {}, batch {}, {} timed steps x {} repeats (interleaved), {} "
      "on {}\n",
      device.to_string(), o.batch_size, o.steps, o.repeats, kernels::backend_info().cpu_isa,
      cpu_info().model_name);
  fmt::print("{:<6} {:<15} {:>7} {:>12} {:>8} {:>8} {:>12} {:>12} {:>16} {:>9}\n", "model",
             "precision", "threads", "median ex/s", "min", "max", "tokens/s", "model GF/s",
             "peak act. MiB", "optimizer");
  for (const Variant& v : variants) {
    const double m = median(v.samples);
    fmt::print("{:<6} {:<15} {:>7} {:>12.1f} {:>8.1f} {:>8.1f} {:>12} {:>12} {:>16.1f} {:>9}\n",
               v.model, precision::policy_name(v.policy), v.threads, m,
               *std::min_element(v.samples.begin(), v.samples.end()),
               *std::max_element(v.samples.begin(), v.samples.end()),
               v.tokens_per_example > 1
                   ? fmt::format("{:.0f}", m * static_cast<double>(v.tokens_per_example))
                   : "-",
               v.model_flops_per_example > 0
                   ? fmt::format("{:.1f}", m * v.model_flops_per_example / 1e9)
                   : "-",
               static_cast<double>(v.peak_activation_bytes) / (1 << 20), v.optimizer);
  }
}

int run_bench_train(const BenchTrainOptions& o) {
  if (o.repeats < 1) TANDEM_THROW(InvalidArgument, "--repeats must be at least 1, got ", o.repeats);
  const Device device = parse_device(o.device);
  const std::vector<int> threads = thread_counts(o, device);
  std::optional<optim::OptimizerKind> optimizer;
  if (!o.optimizer.empty()) optimizer = optim::parse_optimizer(o.optimizer);
  std::vector<Variant> variants;
  for (const auto& model : split_list(o.models)) {
    for (const auto& name : split_list(o.precisions)) {
      const precision::Policy policy = precision::parse_policy(name);
      for (int t : threads) variants.push_back({model, policy, t, {}});
    }
  }
  if (variants.empty())
    TANDEM_THROW(InvalidArgument, "nothing to measure: empty --models or --precisions");
  const int saved_threads = num_threads();
  for (int r = 0; r < o.repeats; ++r) {
    for (Variant& v : variants) {
      set_num_threads(v.threads);
      const train::ThroughputResult result = train::measure_training_throughput(
          {.model = v.model,
           .settings = v.model == "gpt" || v.model == "resnet" ? o.model_options : std::string(),
           .policy = v.policy,
           .batch_size = o.batch_size,
           .warmup_steps = o.warmup,
           .steps = o.steps,
           .seed = static_cast<uint64_t>(r),
           .optimizer = optimizer,
           .device = device});
      v.samples.push_back(result.examples_per_second);
      v.peak_activation_bytes = std::max(v.peak_activation_bytes, result.peak_activation_bytes);
      v.tokens_per_example = result.tokens_per_example;
      v.model_flops_per_example = result.model_flops_per_example;
      v.optimizer = optim::optimizer_name(result.optimizer);
      if (!o.json) {
        fmt::print(stderr, "  repeat {}/{}: {} {} {} thread(s): {:.0f} ex/s\n", r + 1, o.repeats,
                   v.model, precision::policy_name(v.policy), v.threads,
                   result.examples_per_second);
      }
    }
  }
  set_num_threads(saved_threads);
  if (o.json) {
    print_train_json(o, device, variants);
  } else {
    print_train_table(o, device, variants);
  }
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("bench", "Measure tandem's speed");
  command->require_subcommand(1);
  CLI::App* train = command->add_subcommand("train", "Training throughput of the reference models");
  auto o = std::make_shared<BenchTrainOptions>();
  train->add_option("--models", o->models, "Comma-separated models (cnn, mlp, gpt, resnet)")
      ->capture_default_str();
  train->add_option("--model-options", o->model_options,
                    "Settings of gpt and resnet, KEY=VALUE,... (as tandem train's)");
  train
      ->add_option("--precisions", o->precisions,
                   "Comma-separated policies (float32, mixed_bfloat16, mixed_float16)")
      ->capture_default_str();
  train->add_option("--device", o->device, "cpu, or cuda:N for a GPU")->capture_default_str();
  train->add_option("--threads", o->threads,
                    "Comma-separated thread counts (default: 1 and the physical core count)");
  train->add_option("--batch-size,--batch", o->batch_size, "Batch size")->capture_default_str();
  train->add_option("--steps", o->steps, "Timed steps per sample")->capture_default_str();
  train->add_option("--warmup", o->warmup, "Untimed steps before each sample")
      ->capture_default_str();
  train->add_option("--repeats", o->repeats, "Samples per variant")->capture_default_str();
  train->add_option("--optimizer", o->optimizer,
                    "sgd, adam, adamw, lars or lamb, with its defaults (default: each model's "
                    "recipe, as bench/pytorch and bench/tensorflow train it: adamw at 6e-4 for "
                    "gpt, sgd with momentum 0.9 at 0.05 for the others)");
  train->add_flag("--json", o->json, "Print the table as JSON");
  std::vector<Command> others = add_bench_comm_commands(*command);
  others.push_back(add_bench_pipeline_command(*command));
  others.push_back(add_bench_scaling_command(*command));
  others.push_back(add_bench_peak_command(*command));
  others.push_back(add_bench_monitor_command(*command));
  others.push_back(add_bench_sync_async_command(*command));
  return {command, [o, train, others]() {
            if (train->parsed()) return run_bench_train(*o);
            for (const Command& c : others) {
              if (c.app->parsed()) return c.run();
            }
            return 2;
          }};
}

}  // namespace tandem::cli
