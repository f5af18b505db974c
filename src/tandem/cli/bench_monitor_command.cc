// `tandem bench monitor`: what the monitor costs. One mirrored Trainer trains
// the same number of steps again and again, in turn with the monitor
// (metrics.jsonl every step, TensorBoard events, memory snapshots, busy
// fractions; trace off), with it but without TensorBoard, and without it,
// in one process so that all see the same machine moments;
// throughput is steps x batch over fit()'s wall time, which includes the
// callbacks. Also reports the monitor's own time, measured inside it.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tandem/base/error.h"
#include "tandem/base/statistics.h"
#include "tandem/cli/commands.h"
#include "tandem/monitor/monitor.h"
#include "tandem/nn/models.h"
#include "tandem/train/run_directory.h"
#include "tandem/train/trainer.h"

namespace tandem::cli {
namespace {

struct MonitorBenchOptions {
  std::string model = "cnn";
  int devices = 2;
  int64_t batch_size = 128;
  int64_t steps = 50;
  int rounds = 10;
  int64_t metrics_every = 1;
  std::string run_dir;  // default: a directory under the system's temporary one
  bool json = false;
};

// Examples per second and the monitor's own fraction of the wall time, per
// variant (0: the monitor as tandem train runs it, 1: without TensorBoard,
// 2: no monitor) and round, and each round's ratio of variant 0 to 2.
struct MonitorBenchRounds {
  static constexpr int kVariants = 3;
  std::vector<double> rate[kVariants], own[kVariants], ratios;
};

void report_bench_monitor(const MonitorBenchOptions& o, const MonitorBenchRounds& m);

int run_bench_monitor(const MonitorBenchOptions& o) {
  if (o.rounds < 1 || o.steps < 1 || o.batch_size < 1 || o.devices < 1)
    TANDEM_THROW(InvalidArgument, "--rounds, --steps, --batch-size and --devices must be positive");
  nn::make_model(o.model);  // validates the name
  const std::string run_dir =
      o.run_dir.empty() ? (std::filesystem::temp_directory_path() / "tandem-bench-monitor").string()
                        : o.run_dir;
  train::TrainConfig config{
      .epochs = 1, .batch_size = o.batch_size, .schedule = optim::ScheduleKind::constant};
  config.strategy = {.kind = o.devices > 1 ? distribute::StrategyKind::mirrored
                                           : distribute::StrategyKind::one_device,
                     .devices = o.devices,
                     .threads_per_device = 1,
                     .allow_oversubscription = true};
  train::Trainer trainer(config, train::builtin_model(o.model, precision::Policy::float32));
  const data::Dataset data = data::as_dataset(synthetic_images(o.batch_size * o.steps));
  const auto timed_fit = [&](const train::TrainCallbacks& callbacks) {
    const auto start = std::chrono::steady_clock::now();
    trainer.fit(data, {}, callbacks);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return static_cast<double>(o.batch_size * o.steps) / seconds;
  };
  const monitor::RunInfo info = monitor::describe_run(trainer, trainer.steps_per_epoch(data));
  timed_fit({});  // warm-up: primitives, allocator caches
  // Three variants per round, in an order that rotates: the monitor as
  // tandem train runs it (metrics.jsonl and TensorBoard events), the monitor
  // without TensorBoard, and no monitor.
  constexpr int kVariants = MonitorBenchRounds::kVariants;
  MonitorBenchRounds rounds;
  auto &rate = rounds.rate, &own = rounds.own;
  std::vector<double>& ratios = rounds.ratios;
  const auto monitored = [&](bool tensorboard, std::vector<double>& own_fraction) {
    const std::filesystem::path events =
        std::filesystem::path(train::RunDirectory(run_dir).tensorboard());
    std::filesystem::remove_all(events);
    monitor::Monitor m({.run_dir = run_dir,
                        .metrics_every = o.metrics_every,
                        .tensorboard_dir = tensorboard ? events.string() : std::string()},
                       info);
    const auto start = std::chrono::steady_clock::now();
    const double examples_per_second =
        timed_fit({.on_step = [&](const train::StepInfo& s) { m.on_step(s); },
                   .on_epoch = [&](const train::EpochResult& e) { m.on_epoch(e); }});
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    own_fraction.push_back(m.own_seconds() / wall);
    return examples_per_second;
  };
  for (int r = 0; r < o.rounds; ++r) {
    for (int turn = 0; turn < kVariants; ++turn) {
      const int v = (turn + r) % kVariants;
      rate[v].push_back(v == 2 ? timed_fit({}) : monitored(v == 0, own[v]));
    }
    ratios.push_back(rate[0].back() / rate[2].back());
    if (!o.json) {
      fmt::print("round {}/{}: monitor {:.0f} ex/s, without TensorBoard {:.0f}, off {:.0f}\n",
                 r + 1, o.rounds, rate[0].back(), rate[1].back(), rate[2].back());
    }
  }
  report_bench_monitor(o, rounds);
  return 0;
}

void report_bench_monitor(const MonitorBenchOptions& o, const MonitorBenchRounds& m) {
  const auto &rate = m.rate, &own = m.own;
  const std::vector<double>& ratios = m.ratios;
  const double ratio = median(ratios);
  // The monitor's own time per step, with and without the event writes.
  const double steps = static_cast<double>(o.steps);
  const auto per_step_us = [&](int v) {
    std::vector<double> us;
    for (size_t i = 0; i < own[v].size(); ++i)
      us.push_back(own[v][i] * static_cast<double>(o.batch_size) * steps / rate[v][i] / steps *
                   1e6);
    return median(us);
  };
  const double own_us = per_step_us(0), own_without_us = per_step_us(1);
  if (o.json) {
    nlohmann::json j = {{"model", o.model},
                        {"devices", o.devices},
                        {"steps", o.steps},
                        {"rounds", o.rounds},
                        {"monitor_examples_per_second", rate[0]},
                        {"monitor_without_tensorboard_examples_per_second", rate[1]},
                        {"off_examples_per_second", rate[2]},
                        {"ratio_median", ratio},
                        {"ratio_min", *std::min_element(ratios.begin(), ratios.end())},
                        {"ratio_max", *std::max_element(ratios.begin(), ratios.end())},
                        {"monitor_own_fraction_median", median(own[0])},
                        {"monitor_own_microseconds_per_step", own_us},
                        {"monitor_without_tensorboard_own_microseconds_per_step", own_without_us}};
    fmt::print("{}\n", j.dump(2));
    return;
  }
  const auto row = [](const char* label, const std::vector<double>& v) {
    fmt::print("  {:26s} median {:7.0f} ex/s  min {:7.0f}  max {:7.0f}\n", label, median(v),
               *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
  };
  fmt::print("{} on {} device(s), {} steps x batch {} per run, {} interleaved rounds\n", o.model,
             o.devices, o.steps, o.batch_size, o.rounds);
  row("monitor on (trace off)", rate[0]);
  row("monitor, no TensorBoard", rate[1]);
  row("monitor off", rate[2]);
  fmt::print(
      "  per-round ratio on/off     median {:.4f}  min {:.4f}  max {:.4f}  (overhead {:.2f}%)\n",
      ratio, *std::min_element(ratios.begin(), ratios.end()),
      *std::max_element(ratios.begin(), ratios.end()), 100.0 * (1.0 - ratio));
  fmt::print(
      "  the monitor's own time     median {:.3f}% of the run's wall time; {:.1f} us per "
      "step, {:.1f} us without TensorBoard (the event writes: {:.1f} us per step)\n",
      100.0 * median(own[0]), own_us, own_without_us, own_us - own_without_us);
}

}  // namespace

Command add_bench_monitor_command(CLI::App& bench) {
  CLI::App* c = bench.add_subcommand(
      "monitor", "What monitoring costs: training with and without the monitor, interleaved");
  auto o = std::make_shared<MonitorBenchOptions>();
  c->add_option("--model", o->model, "cnn or mlp")->capture_default_str();
  c->add_option("--devices", o->devices, "Mirrored replicas (1 thread each)")
      ->capture_default_str();
  c->add_option("--batch-size,--batch", o->batch_size, "Global batch size")->capture_default_str();
  c->add_option("--steps", o->steps, "Steps per run")->capture_default_str();
  c->add_option("--rounds", o->rounds, "Rounds of the three variants (the order rotates)")
      ->capture_default_str();
  c->add_option("--metrics-every", o->metrics_every, "The monitor's metrics.jsonl interval (steps)")
      ->capture_default_str();
  c->add_option("--run-dir", o->run_dir, "Where the monitored runs write metrics.jsonl");
  c->add_flag("--json", o->json, "Print as JSON");
  return {c, [o]() { return run_bench_monitor(*o); }};
}

}  // namespace tandem::cli
