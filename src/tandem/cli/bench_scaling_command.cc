// `tandem bench scaling`: training throughput with 1..N replicas, against the
// machine's capacity measured in the same run. Variants, interleaved in every
// repeat (medians with min and max):
//  - capacity: N independent one-device, one-thread trainings at the same
//    time (what N replicas could do with perfect communication: on these VMs
//    the cores are not equal, so it can be well under N x one device);
//  - one_device x 1 thread, one_device x N threads;
//  - mirrored with d devices x 1 thread, d = 2..N.
// For the replicated runs each step splits into input (assembling the batch),
// exposed communication (after the last replica's backward), idle (replicas
// waiting: to start, for the slowest backward, for the step's end; means over
// replicas) and compute (the rest). Any built-in model: the image models on
// random 28x28x1 images, gpt on random token sequences of its context.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <nlohmann/json.hpp>
#include <thread>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/random.h"
#include "tandem/base/statistics.h"
#include "tandem/cli/commands.h"
#include "tandem/nn/models.h"
#include "tandem/train/throughput.h"
#include "tandem/train/trainer.h"

namespace tandem::cli {
namespace {

struct ScalingOptions {
  std::string model = "cnn";
  std::string model_options;  // nn::ModelOptions::settings of gpt and resnet
  int max_devices = 0;
  int64_t batch_size = 128;
  int64_t steps = 30;
  int64_t warmup = 5;
  int repeats = 3;
  bool json = false;
};

struct Run {
  double examples_per_second = 0, input = 0, exposed = 0, idle = 0;  // fractions of step time
};

struct Series {
  std::string name;
  int devices = 1;
  std::vector<Run> runs;
  double median(double Run::*field) const {
    std::vector<double> v;
    for (const Run& r : runs) v.push_back(r.*field);
    return tandem::median(std::move(v));
  }
  double min() const {
    double m = runs.front().examples_per_second;
    for (const Run& r : runs) m = std::min(m, r.examples_per_second);
    return m;
  }
  double max() const {
    double m = 0;
    for (const Run& r : runs) m = std::max(m, r.examples_per_second);
    return m;
  }
};

// The synthetic training data and the features the model reads.
struct BenchData {
  data::Dataset dataset;
  std::string input = "image", labels = "label";
};

BenchData bench_data(const ScalingOptions& o) {
  const int64_t n = o.batch_size * (o.steps + o.warmup);
  const train::ModelFactory factory = train::builtin_model(
      o.model, precision::Policy::float32, 0, std::nullopt, o.model_options);  // validates
  const train::ModelInput input = train::model_input(factory.spec, *factory.build());
  if (input.vocabulary == 0) return {data::as_dataset(synthetic_images(n))};
  const Shape shape{n, input.example.dim(0)};
  Generator g(5);
  Tensor tokens = train::random_tokens(shape, input.vocabulary, g);
  Tensor targets = train::random_tokens(shape, input.vocabulary, g);
  return {data::Dataset::from_tensors({{"tokens", tokens}, {"targets", targets}}), "tokens",
          "targets"};
}

Run train_run(const ScalingOptions& o, const std::string& strategy, int devices, int threads,
              const BenchData& data, bool overlap = true) {
  train::TrainConfig config{
      .epochs = 1, .batch_size = o.batch_size, .schedule = optim::ScheduleKind::constant};
  config.input_feature = data.input;
  config.loss = train::make_loss("softmax_cross_entropy", {.labels = data.labels});
  config.metrics.clear();  // throughput only
  config.strategy = {.kind = distribute::parse_strategy(strategy),
                     .devices = devices,
                     .threads_per_device = threads,
                     .allow_oversubscription = true};
  config.engine.reducer.overlap = overlap;
  train::Trainer trainer(config, train::builtin_model(o.model, precision::Policy::float32, 0,
                                                      std::nullopt, o.model_options));
  double seconds = 0, input = 0, exposed = 0, idle = 0;
  int64_t examples = 0;
  train::TrainCallbacks callbacks;
  callbacks.on_step = [&](const train::StepInfo& s) {
    if (s.step <= o.warmup) return;
    seconds += s.step_seconds;
    input += s.input_seconds;
    exposed += s.exposed_communication_seconds;
    idle += s.idle_seconds;
    examples += s.batch_examples;
  };
  trainer.fit(data.dataset, {}, callbacks);
  return {static_cast<double>(examples) / seconds, input / seconds, exposed / seconds,
          idle / seconds};
}

// N independent one-thread trainings at once: the sum of their rates.
Run capacity_run(const ScalingOptions& o, int n) {
  std::vector<double> rates(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      set_num_threads(1);
      rates[i] = train::measure_training_throughput({.model = o.model,
                                                     .settings = o.model_options,
                                                     .batch_size = o.batch_size,
                                                     .warmup_steps = o.warmup,
                                                     .steps = o.steps,
                                                     .seed = static_cast<uint64_t>(i)})
                     .examples_per_second;
    });
  }
  for (auto& t : threads) t.join();
  Run r;
  for (double v : rates) r.examples_per_second += v;
  return r;
}

int run_bench_scaling(const ScalingOptions& o) {
  if (o.max_devices < 0 || o.max_devices > 1024)
    TANDEM_THROW(InvalidArgument, "--max-devices must be 1 to 1024 (0: the physical cores), got ",
                 o.max_devices);
  const int n = o.max_devices > 0 ? o.max_devices : std::max(1, cpu_info().physical_cores);
  if (o.repeats < 1 || o.steps < 1 || o.warmup < 0 || o.batch_size < 1) {
    TANDEM_THROW(InvalidArgument,
                 "--repeats, --steps and --batch-size must be positive, --warmup >= 0");
  }
  const BenchData data = bench_data(o);
  std::vector<Series> series;
  series.push_back({fmt::format("capacity: {} x independent 1-thread", n), n, {}});
  series.push_back({"one_device x 1 thread", 1, {}});
  if (n > 1) series.push_back({fmt::format("one_device x {} threads", n), 1, {}});
  for (int d = 2; d <= n; ++d)
    series.push_back({fmt::format("mirrored {} devices x 1 thread", d), d, {}});
  series.push_back({fmt::format("mirrored {} devices, no overlap", n), n, {}});
  for (int r = 0; r < o.repeats; ++r) {
    size_t k = 0;
    series[k++].runs.push_back(capacity_run(o, n));
    series[k++].runs.push_back(train_run(o, "one_device", 1, 1, data));
    if (n > 1) series[k++].runs.push_back(train_run(o, "one_device", 1, n, data));
    for (int d = 2; d <= n; ++d) series[k++].runs.push_back(train_run(o, "mirrored", d, 1, data));
    series[k++].runs.push_back(train_run(o, "mirrored", n, 1, data, false));
    if (!o.json) fmt::print(stderr, "  repeat {}/{} done\n", r + 1, o.repeats);
  }
  const double one = series[1].median(&Run::examples_per_second);
  const double capacity = series[0].median(&Run::examples_per_second);
  nlohmann::json rows = nlohmann::json::array();
  if (!o.json) {
    fmt::print(
        "scaling: {} batch {} (global), {} timed steps after {} warm-up, {} repeats "
        "(interleaved)\n",
        o.model, o.batch_size, o.steps, o.warmup, o.repeats);
    fmt::print("{:<38} {:>9} {:>8} {:>8} {:>10} {:>9} {:>7} {:>8} {:>6}\n", "variant", "ex/s",
               "min", "max", "efficiency", "capacity", "input", "exposed", "idle");
  }
  for (const Series& s : series) {
    const double eps = s.median(&Run::examples_per_second);
    const double efficiency = eps / (s.devices * one);
    const double of_capacity = eps / capacity;
    const bool replicated = s.name.rfind("mirrored", 0) == 0;
    rows.push_back({{"variant", s.name},
                    {"devices", s.devices},
                    {"examples_per_second_median", eps},
                    {"min", s.min()},
                    {"max", s.max()},
                    {"scaling_efficiency", efficiency},
                    {"fraction_of_capacity", of_capacity},
                    {"input_fraction", s.median(&Run::input)},
                    {"exposed_communication_fraction", s.median(&Run::exposed)},
                    {"idle_fraction", s.median(&Run::idle)}});
    if (!o.json) {
      fmt::print("{:<38} {:>9.0f} {:>8.0f} {:>8.0f} {:>10} {:>8.1f}% {:>6.2f}% {:>7} {:>6}\n",
                 s.name, eps, s.min(), s.max(),
                 s.devices > 1 ? fmt::format("{:.2f}", efficiency) : "", 100 * of_capacity,
                 100 * s.median(&Run::input),
                 replicated ? fmt::format("{:.2f}%", 100 * s.median(&Run::exposed)) : "",
                 replicated ? fmt::format("{:.1f}%", 100 * s.median(&Run::idle)) : "");
    }
  }
  if (o.json) {
    fmt::print("{}\n", nlohmann::json{{"bench", "scaling"},
                                      {"model", o.model},
                                      {"model_options", o.model_options},
                                      {"batch_size", o.batch_size},
                                      {"steps", o.steps},
                                      {"repeats", o.repeats},
                                      {"results", rows}}
                           .dump(2));
  }
  return 0;
}

}  // namespace

data::LabeledImages synthetic_images(int64_t n) {
  Generator g(5);
  Tensor x = Tensor::empty(Shape{n, 28, 28, 1});
  g.normal(x.data<float>(), x.numel());
  std::vector<int32_t> y(static_cast<size_t>(n));
  for (auto& v : y) v = static_cast<int32_t>(g.next_below(10));
  return {x, Tensor::from_ints(Shape{n}, y)};
}

Command add_bench_scaling_command(CLI::App& bench) {
  CLI::App* c = bench.add_subcommand(
      "scaling", "Throughput with 1..N replicas against the machine's capacity");
  auto o = std::make_shared<ScalingOptions>();
  c->add_option("--model", o->model, "cnn, mlp, gpt or resnet")->capture_default_str();
  c->add_option("--model-options", o->model_options,
                "Settings of gpt and resnet, KEY=VALUE,... (as tandem train's)");
  c->add_option("--max-devices", o->max_devices, "Most replicas (default: physical cores)");
  c->add_option("--batch-size,--batch", o->batch_size, "Global batch")->capture_default_str();
  c->add_option("--steps", o->steps, "Timed steps per run")->capture_default_str();
  c->add_option("--warmup", o->warmup, "Untimed steps per run")->capture_default_str();
  c->add_option("--repeats", o->repeats, "Samples per variant")->capture_default_str();
  c->add_flag("--json", o->json, "Print the table as JSON");
  return {c, [o] { return run_bench_scaling(*o); }};
}

}  // namespace tandem::cli
