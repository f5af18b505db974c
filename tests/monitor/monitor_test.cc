// The monitor against runs with known problems: the step breakdown agrees
// with an independent clock, a slow input and a slow replica are named as
// such in summary.json and the report, metrics.jsonl parses line by line,
// the trace has the expected tracks, and the report says what is missing
// from an incomplete run.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>
#include <vector>

#include "support/test_data.h"
#include "tandem/base/error.h"
#include "tandem/data/fashion_mnist.h"
#include "tandem/kernels/flops.h"
#include "tandem/monitor/detail/metrics_json.h"
#include "tandem/monitor/model_flops.h"
#include "tandem/monitor/monitor.h"
#include "tandem/monitor/progress_view.h"
#include "tandem/monitor/report.h"
#include "tandem/monitor/step_schema.h"
#include "tandem/monitor/svg_chart.h"
#include "tandem/nn/models.h"
#include "tandem/train/summary.h"
#include "tandem/train/trainer.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing::fashion;

data::Dataset head(int64_t n) {
  return testing::shuffled({fashion().train.images.slice(0, n), fashion().train.labels.slice(0, n)},
                           3);
}

std::string fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(TANDEM_TEST_TMPDIR) / ("monitor_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// The mlp, optionally sleeping in every forward pass: a replica on a slow device.
class SometimesSlow : public nn::Module {
 public:
  SometimesSlow(std::shared_ptr<nn::Module> inner, bool slow) : inner_(inner), slow_(slow) {
    register_module("inner", std::move(inner));
  }
  Variable forward(const Variable& x) override {
    if (slow_ && is_training()) std::this_thread::sleep_for(std::chrono::milliseconds(15));
    return inner_->forward(x);
  }
  std::string describe() const override { return "SometimesSlow"; }

 private:
  std::shared_ptr<nn::Module> inner_;
  bool slow_;
};

train::TrainConfig config(int devices) {
  train::TrainConfig c{.epochs = 1, .batch_size = 32, .engine = {.seed = 3}};
  c.strategy = {.kind = devices > 1 ? distribute::StrategyKind::mirrored
                                    : distribute::StrategyKind::one_device,
                .devices = devices,
                .threads_per_device = 1,
                .allow_oversubscription = true};
  return c;
}

train::ModelFactory factory(int slow_replica = -1) {
  auto built = std::make_shared<int>(0);
  return train::custom_model("mlp", [built, slow_replica] {
    const bool slow = (*built)++ == slow_replica;
    return std::make_shared<SometimesSlow>(nn::make_model("mlp", {.seed = 3}), slow);
  });
}

monitor::RunInfo run_info(train::Trainer& t, const data::Dataset& train) {
  monitor::RunInfo info = monitor::describe_run(t, t.steps_per_epoch(train));
  info.peak_flops_per_device = 1e11;
  info.device_memory_bytes = int64_t{1} << 32;
  return info;
}

// Trains with a monitor writing into dir; writes summary.json like the CLI.
json monitored_run(const std::string& dir, train::TrainConfig c, const train::ModelFactory& f,
                   int64_t examples, monitor::MonitorOptions options = {},
                   int64_t test_examples = 64) {
  train::Trainer t(c, f);
  const data::Dataset train = head(examples);
  options.run_dir = dir;
  monitor::Monitor m(options, run_info(t, train));
  const train::TrainResult result =
      t.fit(train, head(test_examples),
            {.on_step = [&](const train::StepInfo& s) { m.on_step(s); },
             .on_epoch = [&](const train::EpochResult& e) { m.on_epoch(e); }});
  m.finish();
  const std::string path = (fs::path(dir) / "summary.json").string();
  train::write_summary(path, c, t.model_spec(), result, {}, {{"monitor", m.summary_json()}});
  std::ifstream in(path);
  return json::parse(in);
}

std::set<std::string> finding_kinds(const json& summary) {
  std::set<std::string> kinds;
  for (const auto& f : summary.at("monitor").at("findings"))
    kinds.insert(f.at("kind").get<std::string>());
  return kinds;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The step breakdown against what the test knows independently: its own
// clock between steps, a 6 ms sleep in the input, a 15 ms sleep in replica
// 0's forward pass. (Idle is defined as the rest of the step, so the parts
// always add up; these checks are the ones that can fail.)
TEST(Timeline, TheBreakdownAgreesWithAnIndependentClock) {
  for (int devices : {1, 2}) {
    train::TrainConfig c = config(devices);
    c.batch_size = 30;
    c.batch_transform = [](data::Element batch) {
      std::this_thread::sleep_for(std::chrono::milliseconds(6));
      return batch;
    };
    train::Trainer t(c, factory(0));
    std::vector<double> step_to_interval, input, slow_forward, fast_forward, fast_waiting;
    auto last = std::chrono::steady_clock::now();
    t.fit(head(360), {}, {.on_step = [&](const train::StepInfo& s) {
            const auto now = std::chrono::steady_clock::now();
            const double interval = std::chrono::duration<double>(now - last).count();
            last = now;
            ASSERT_EQ(s.replicas.size(), static_cast<size_t>(devices));
            if (s.step == 1) return;  // the interval also holds the fit's set-up
            step_to_interval.push_back(s.step_seconds / interval);
            input.push_back(s.input_seconds);
            slow_forward.push_back(s.replicas[0].forward);
            if (devices > 1) {
              fast_forward.push_back(s.replicas[1].forward);
              fast_waiting.push_back(s.replicas[1].idle + s.replicas[1].communication);
            }
          }});
    ASSERT_EQ(step_to_interval.size(), 11u);
    // The step time is the time between steps, less the trainer's bookkeeping.
    EXPECT_GT(median_of(step_to_interval), 0.8) << devices << " devices";
    EXPECT_LE(median_of(step_to_interval), 1.0) << devices << " devices";
    // A sleep is never shorter than asked: these are lower bounds.
    EXPECT_GE(median_of(input), 0.006) << devices << " devices";
    EXPECT_GE(median_of(slow_forward), 0.015) << devices << " devices";
    if (devices > 1) {
      // The fast replica's wait for the slow one is idle or communication,
      // not its own compute.
      EXPECT_LT(median_of(fast_forward), 0.010);
      EXPECT_GT(median_of(fast_waiting), 0.008);
    }
  }
}

TEST(Monitor, SlowInputIsDiagnosedInTheSummaryAndTheReport) {
  const std::string dir = fresh_dir("slow_input");
  train::TrainConfig c = config(2);
  c.batch_transform = [](data::Element batch) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return batch;
  };
  const json summary = monitored_run(dir, c, factory(), 320);
  EXPECT_TRUE(finding_kinds(summary).count("input_bound")) << summary.at("monitor").dump(1);
  EXPECT_GT(summary.at("monitor").at("input_fraction").get<double>(), 0.5);
  // The input's 20 ms is nobody's compute: each replica's forward and
  // backward stay far below it. (Not "no straggler finding": on a loaded
  // machine one replica thread can be genuinely and consistently slower.)
  for (const auto& r : summary.at("monitor").at("replicas")) {
    EXPECT_LT(r.at("forward").get<double>() + r.at("backward").get<double>(), 0.010)
        << summary.at("monitor").dump(1);
  }

  const monitor::ReportResult report = monitor::write_report(dir);
  EXPECT_TRUE(report.warnings.empty());
  bool named = false;
  for (const auto& f : report.findings) named = named || f.kind == "input_bound";
  EXPECT_TRUE(named);
  const std::string html = read_file(report.path);
  EXPECT_NE(html.find("input-bound: "), std::string::npos);
  EXPECT_NE(html.find("raise prefetch (--prefetch"), std::string::npos);
  EXPECT_NE(html.find("--input-parallel"), std::string::npos);
}

// The advice behind input_bound works: prefetching batches on another
// thread hides an input stage that is slower than nothing but shorter than
// the step, and the finding goes away.
TEST(Monitor, PrefetchHidesASlowInputStage) {
  const train::ModelFactory slow_everywhere = train::custom_model("mlp", [] {
    return std::make_shared<SometimesSlow>(nn::make_model("mlp", {.seed = 3}), true);
  });
  train::TrainConfig c = config(2);
  c.batch_transform = [](data::Element batch) {
    std::this_thread::sleep_for(std::chrono::milliseconds(8));
    return batch;
  };
  const json waiting = monitored_run(fresh_dir("no_prefetch"), c, slow_everywhere, 320);
  EXPECT_TRUE(finding_kinds(waiting).count("input_bound")) << waiting.at("monitor").dump(1);
  c.prefetch_batches = 2;
  const json prefetched = monitored_run(fresh_dir("prefetch"), c, slow_everywhere, 320);
  EXPECT_FALSE(finding_kinds(prefetched).count("input_bound")) << prefetched.at("monitor").dump(1);
  EXPECT_LT(prefetched.at("monitor").at("input_fraction").get<double>(),
            0.5 * waiting.at("monitor").at("input_fraction").get<double>());
}

// An input stage slower than the step itself (30 ms against about 20): prefetch
// alone cannot hide it (the buffer drains), building two batches at once can
// (the data pool has at least 2 threads); the epoch line, summary.json and
// the report show the pipeline's stages.
TEST(Monitor, ParallelBatchBuildingHidesAnInputStageSlowerThanTheStep) {
  const train::ModelFactory slow_everywhere = train::custom_model("mlp", [] {
    return std::make_shared<SometimesSlow>(nn::make_model("mlp", {.seed = 3}), true);
  });
  train::TrainConfig c = config(2);
  c.batch_transform = [](data::Element batch) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return batch;
  };
  c.prefetch_batches = 2;
  const json prefetched = monitored_run(fresh_dir("prefetch_only"), c, slow_everywhere, 640);
  EXPECT_TRUE(finding_kinds(prefetched).count("input_bound")) << prefetched.at("monitor").dump(1);
  c.input_parallel_calls = 2;
  const std::string dir = fresh_dir("parallel_input");
  const json parallel = monitored_run(dir, c, slow_everywhere, 640);
  EXPECT_FALSE(finding_kinds(parallel).count("input_bound")) << parallel.at("monitor").dump(1);
  EXPECT_LT(parallel.at("monitor").at("input_fraction").get<double>(),
            0.5 * prefetched.at("monitor").at("input_fraction").get<double>());

  const json& stages = parallel.at("monitor").at("input_pipeline");
  // tensors -> shuffle -> batch -> map(batch_transform) -> prefetch
  ASSERT_EQ(stages.size(), 5u) << stages.dump(1);
  EXPECT_EQ(stages[0].at("stage"), "tensors");
  EXPECT_EQ(stages[2].at("stage"), "batch(32)");
  EXPECT_EQ(stages[3].at("buffer_capacity").get<int64_t>(), 2);
  EXPECT_GE(stages[3].at("elements").get<int64_t>(), 20);
  EXPECT_GT(stages[3].at("busy_seconds").get<double>(), 20 * 0.025);
  std::ifstream in(fs::path(dir) / "metrics.jsonl");
  int epoch_lines = 0;
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    if (j.at("type") != "epoch") continue;
    ++epoch_lines;
    EXPECT_EQ(j.at("input_pipeline"), stages);
  }
  EXPECT_EQ(epoch_lines, 1);
  const std::string html = read_file(monitor::write_report(dir).path);
  EXPECT_NE(html.find("Input pipeline (to epoch 1)"), std::string::npos);
  EXPECT_NE(html.find("<td>batch(32)</td>"), std::string::npos);
}

TEST(Monitor, SlowReplicaIsNamedAndNotHiddenByTheAllReduce) {
  const std::string dir = fresh_dir("slow_replica");
  const json summary = monitored_run(dir, config(2), factory(/*slow_replica=*/1), 320);
  EXPECT_TRUE(finding_kinds(summary).count("straggler")) << summary.at("monitor").dump(1);
  EXPECT_FALSE(finding_kinds(summary).count("input_bound"));
  bool named = false;
  for (const auto& f : summary.at("monitor").at("findings"))
    if (f.at("kind") == "straggler")
      named = f.at("message").get<std::string>().find("replica 1 is") != std::string::npos;
  EXPECT_TRUE(named) << summary.at("monitor").at("findings").dump(1);
  // The fast replica's compute stays short; its wait shows as idle.
  const auto& replicas = summary.at("monitor").at("replicas");
  const double fast =
      replicas[0].at("forward").get<double>() + replicas[0].at("backward").get<double>();
  const double slow =
      replicas[1].at("forward").get<double>() + replicas[1].at("backward").get<double>();
  EXPECT_GT(slow, fast + 0.010);
  EXPECT_GT(replicas[0].at("idle").get<double>(), 0.010);

  const monitor::ReportResult report = monitor::write_report(dir);
  EXPECT_NE(read_file(report.path).find("straggler: replica 1 is"), std::string::npos);

  // The buckets' all-reduce times start when both replicas have arrived, so
  // the fast replica's wait for the slow one (the 15 ms sleep) is not counted
  // as collective time. Counted, every step would show 15 ms or more; the
  // median over steps keeps a loaded machine's slow all-reduce (5 ms seen
  // under ctest -j2) from failing the test.
  std::ifstream metrics(fs::path(dir) / "metrics.jsonl");
  std::vector<double> allreduce;
  for (std::string line; std::getline(metrics, line);) {
    const json j = json::parse(line);
    if (j.at("type") == "step") allreduce.push_back(j.at("allreduce_seconds").get<double>());
  }
  ASSERT_EQ(allreduce.size(), 10u);
  std::nth_element(allreduce.begin(), allreduce.begin() + 5, allreduce.end());
  EXPECT_LT(allreduce[5], 0.0075);
}

// The findings' rules on made-up steps with known parts: each bottleneck,
// the numbers in its sentence, and the memory findings.
// The bar fits the terminal: an 80-column one got a 103-character line,
// which wrapped and scrolled.
TEST(ProgressView, TheBarFitsTheTerminal) {
  const std::string status = "loss 0.2566  9032 ex/s  busy 29% 30%  input 1%  ETA 2s";
  const std::string wide = monitor::bar_line(2, 5, 696, 938, "696/938", status, 200);
  EXPECT_NE(wide.find("[" + std::string(17, '#') + std::string(7, '.') + "]"), std::string::npos)
      << wide;
  EXPECT_NE(wide.find(status), std::string::npos) << wide;
  for (int columns : {100, 80, 60, 40, 20}) {
    const std::string line = monitor::bar_line(2, 5, 696, 938, "696/938", status, columns);
    EXPECT_LE(line.size(), static_cast<size_t>(std::max(columns - 1, 20)))
        << columns << ": " << line;
    EXPECT_NE(line.find("epoch 2/5"), std::string::npos) << line;
    EXPECT_NE(line.find("696/938"), std::string::npos) << line;
  }
  // 80 columns keep a shorter bar and the whole status; 60 drop the bar and
  // whole trailing fields.
  EXPECT_NE(monitor::bar_line(2, 5, 696, 938, "696/938", status, 100).find(status),
            std::string::npos);
  const std::string narrow = monitor::bar_line(2, 5, 696, 938, "696/938", status, 60);
  EXPECT_EQ(narrow.find('['), std::string::npos) << narrow;
  EXPECT_NE(narrow.find("loss 0.2566"), std::string::npos) << narrow;
}

// The live line: throughput, each device's busy fraction and the input
// share over the monitor's window, then the ETA.
TEST(ProgressView, PlainLinesShowBusyAndInputShares) {
  monitor::RunInfo info;
  info.devices = {cpu_device(0), cpu_device(1)};
  info.global_replicas = 2;
  info.epochs = 1;
  info.steps_per_epoch = 10;
  monitor::Monitor m({}, info);
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  monitor::ProgressView view(monitor::ProgressMode::lines, 1, false, &m, out, 0.0);
  for (int64_t i = 1; i <= 4; ++i) {
    train::StepInfo s{.epoch = 1, .step = i, .steps_per_epoch = 10, .global_step = i};
    s.loss = 0.5;
    s.batch_examples = 64;
    s.step_seconds = 0.020;
    s.input_seconds = 0.005;  // a quarter of each step
    s.replicas = {{.replica = 0, .forward = 0.005, .backward = 0.010},
                  {.replica = 1, .forward = 0.004, .backward = 0.008, .idle = 0.003}};
    m.on_step(s);
    view.on_step(s);
  }
  std::rewind(out);
  std::string text;
  for (int c = std::fgetc(out); c != EOF; c = std::fgetc(out)) text += static_cast<char>(c);
  std::fclose(out);
  EXPECT_NE(text.find("epoch 1/1 step 4/10  loss 0.5000  3200 ex/s  busy 75% 60%  input 25%  ETA"),
            std::string::npos)
      << text;
}

// Nearest rank: the smallest time with at least q of the steps at or below
// it (two steps' median was their maximum).
TEST(RunStats, StepTimeQuantilesAreNearestRank) {
  monitor::RunStats two(/*warmup_steps=*/0);
  for (double t : {0.2, 0.1}) two.add({.step_seconds = t});
  EXPECT_EQ(two.step_seconds_quantile(0.5), 0.1);
  EXPECT_EQ(two.step_seconds_quantile(1.0), 0.2);
  monitor::RunStats ten(/*warmup_steps=*/0);
  for (int i = 10; i >= 1; --i) ten.add({.step_seconds = static_cast<double>(i)});
  EXPECT_EQ(ten.step_seconds_quantile(0.0), 1.0);
  EXPECT_EQ(ten.step_seconds_quantile(0.5), 5.0);
  EXPECT_EQ(ten.step_seconds_quantile(0.9), 9.0);
  EXPECT_EQ(ten.step_seconds_quantile(0.91), 10.0);
}

// An elastic job's replica that joined late is averaged over its own steps
// (over every step, its times were understated).
TEST(RunStats, AReplicaThatJoinedLateIsAveragedOverItsOwnSteps) {
  monitor::RunStats stats(/*warmup_steps=*/0);
  for (int step = 0; step < 4; ++step) {
    monitor::StepRecord r{.step_seconds = 0.1};
    r.replicas.push_back({.replica = 0, .forward = 0.02});
    if (step >= 2) r.replicas.push_back({.replica = 1, .forward = 0.04});
    stats.add(r);
  }
  ASSERT_EQ(stats.replica_means().size(), 2u);
  EXPECT_DOUBLE_EQ(stats.replica_means()[0].forward, 0.02);
  EXPECT_DOUBLE_EQ(stats.replica_means()[1].forward, 0.04);
}

TEST(RunStats, ComparesTheRunsBatchNotAPartialLastOneWithTheNoiseScale) {
  const auto findings = [](double noise_scale, int64_t last_batch) {
    monitor::RunStats stats(/*warmup_steps=*/0);
    for (int i = 0; i < 4; ++i) {
      monitor::StepRecord r{.global_step = i + 1,
                            .batch_examples = i == 3 ? last_batch : 64,
                            .step_seconds = 0.01,
                            .noise_scale = noise_scale};
      stats.add(r);
    }
    std::map<std::string, std::string> out;
    for (const auto& f : stats.diagnose()) out[f.kind] = f.message;
    return out;
  };
  // The epoch ends with 32 examples: the run's batch is still 64.
  auto below = findings(1823.0, 32);
  ASSERT_TRUE(below.count("batch_below_noise_scale"));
  EXPECT_NE(below["batch_below_noise_scale"].find("the global batch of 64 is 28x below"),
            std::string::npos)
      << below["batch_below_noise_scale"];
  auto above = findings(4.0, 32);
  ASSERT_TRUE(above.count("batch_above_noise_scale"));
  EXPECT_NE(above["batch_above_noise_scale"].find("the global batch of 64 is 16x"),
            std::string::npos)
      << above["batch_above_noise_scale"];
  auto near = findings(100.0, 64);  // within a factor of 8 either way
  EXPECT_FALSE(near.count("batch_below_noise_scale"));
  EXPECT_FALSE(near.count("batch_above_noise_scale"));
}

TEST(RunStats, DiagnosesEachBottleneckWithItsNumbers) {
  const auto steps = [](double input, double forward, double backward, double communication,
                        double slow_extra) {
    monitor::RunStats stats(/*warmup_steps=*/0);
    for (int i = 0; i < 5; ++i) {
      monitor::StepRecord r{.global_step = i + 1, .batch_examples = 128};
      r.replicas = {{.replica = 0,
                     .forward = forward,
                     .backward = backward,
                     .communication = communication,
                     .idle = slow_extra},
                    {.replica = 1,
                     .forward = forward,
                     .backward = backward + slow_extra,
                     .communication = communication}};
      r.input_seconds = input;
      r.step_seconds = input + forward + backward + slow_extra + communication;
      stats.add(r);
    }
    return stats;
  };
  const auto kinds = [](const monitor::RunStats& stats) {
    std::map<std::string, std::string> out;
    for (const auto& f : stats.diagnose()) out[f.kind] = f.message;
    return out;
  };
  // 3 ms of exposed all-reduce in a 10 ms step.
  auto comm = kinds(steps(0.0, 0.002, 0.005, 0.003, 0.0));
  ASSERT_TRUE(comm.count("communication_bound"));
  EXPECT_NE(comm["communication_bound"].find("30% of step time"), std::string::npos)
      << comm["communication_bound"];
  EXPECT_FALSE(comm.count("compute_bound"));
  // 4 ms of input in a 10 ms step.
  auto input = kinds(steps(0.004, 0.002, 0.004, 0.0, 0.0));
  ASSERT_TRUE(input.count("input_bound"));
  EXPECT_NE(input["input_bound"].find("40% of step time"), std::string::npos);
  // Replica 1 needs 3 ms more backward than replica 0's 6 ms of compute.
  auto straggler = kinds(steps(0.0, 0.002, 0.004, 0.0, 0.003));
  ASSERT_TRUE(straggler.count("straggler"));
  EXPECT_NE(straggler["straggler"].find("replica 1 is 50% slower"), std::string::npos)
      << straggler["straggler"];
  EXPECT_NE(straggler["straggler"].find("slow in 100% of the steps"), std::string::npos)
      << straggler["straggler"];
  // Parameter-server workers go at their own pace: both compute for 6 ms
  // per step, but replica 1 gets through half the examples: named, per
  // example (an asynchronous straggler computes fewer, not longer).
  {
    monitor::RunStats stats(/*warmup_steps=*/0);
    for (int i = 0; i < 5; ++i) {
      monitor::StepRecord r{.global_step = i + 1, .batch_examples = 96};
      r.replicas = {{.replica = 0, .forward = 0.002, .backward = 0.004, .examples = 64},
                    {.replica = 1, .forward = 0.002, .backward = 0.004, .examples = 32}};
      r.step_seconds = 0.006;
      stats.add(r);
    }
    const auto found = kinds(stats);
    ASSERT_TRUE(found.count("straggler"));
    EXPECT_NE(found.at("straggler")
                  .find("replica 1 is 100% slower than the others (0.188 vs "
                        "0.094 ms of compute per example"),
              std::string::npos)
        << found.at("straggler");
  }
  // Their communication is pulls and pushes: the finding says so, and
  // does not send them to all-reduce settings.
  {
    monitor::RunStats stats(/*warmup_steps=*/0);
    for (int i = 0; i < 5; ++i) {
      monitor::StepRecord r{.global_step = i + 1, .batch_examples = 96};
      r.replicas = {{.replica = 0,
                     .forward = 0.002,
                     .backward = 0.004,
                     .communication = 0.004,
                     .examples = 48},
                    {.replica = 1,
                     .forward = 0.002,
                     .backward = 0.004,
                     .communication = 0.004,
                     .examples = 48}};
      r.step_seconds = 0.010;
      stats.add(r);
    }
    const auto found = kinds(stats);
    ASSERT_TRUE(found.count("communication_bound"));
    EXPECT_NE(found.at("communication_bound").find("40% of step time pulling parameters"),
              std::string::npos)
        << found.at("communication_bound");
    EXPECT_EQ(found.at("communication_bound").find("all-reduce"), std::string::npos);
  }
  // Slow now and then: replica 1 takes 9 ms more in one step of five, which
  // raises its mean by 1.8 ms (30%), but it is slower than replica 0 in only
  // 20% of the steps (ties in the others): no straggler.
  {
    monitor::RunStats stats(/*warmup_steps=*/0);
    for (int i = 0; i < 5; ++i) {
      const double extra = i == 2 ? 0.009 : 0.0;
      monitor::StepRecord r{.global_step = i + 1, .batch_examples = 128};
      r.replicas = {{.replica = 0, .forward = 0.002, .backward = 0.004, .idle = extra},
                    {.replica = 1, .forward = 0.002, .backward = 0.004 + extra}};
      r.step_seconds = 0.006 + extra;
      stats.add(r);
    }
    EXPECT_FALSE(kinds(stats).count("straggler"));
  }
  // A steady straggler with jitter: replica 1 is 17% slower on average,
  // +-5% per step, so in some steps less than 15% slower, but above replica 0
  // in every one: named.
  {
    monitor::RunStats stats(/*warmup_steps=*/0);
    const double jitter[] = {-0.05, 0.05, -0.03, 0.04, -0.05, 0.02, 0.0, -0.04};
    for (int i = 0; i < 8; ++i) {
      monitor::StepRecord r{.global_step = i + 1, .batch_examples = 128};
      const double slow = 0.0118 * (1.0 + jitter[i]), fast = 0.010 * (1.0 - jitter[i] / 2);
      r.replicas = {{.replica = 0, .forward = 0.0, .backward = fast, .idle = slow - fast},
                    {.replica = 1, .forward = 0.0, .backward = slow}};
      r.step_seconds = slow;
      stats.add(r);
    }
    auto found = kinds(stats);
    ASSERT_TRUE(found.count("straggler"));
    EXPECT_NE(found["straggler"].find("replica 1 is 17% slower"), std::string::npos)
        << found["straggler"];
  }
  // Two slow replicas of four (one throttled socket): each is slow in every
  // step though neither is always the slowest; the slower of them is named.
  {
    monitor::RunStats stats(/*warmup_steps=*/0);
    for (int i = 0; i < 6; ++i) {
      monitor::StepRecord r{.global_step = i + 1, .batch_examples = 128};
      const double a = i % 2 ? 0.0095 : 0.009, b = i % 2 ? 0.009 : 0.0095;
      r.replicas = {{.replica = 0, .forward = 0.002, .backward = 0.004, .idle = 0.0035},
                    {.replica = 1, .forward = 0.002, .backward = 0.004, .idle = 0.0035},
                    {.replica = 2, .forward = 0.002, .backward = a},
                    {.replica = 3, .forward = 0.002, .backward = b}};
      r.step_seconds = 0.0115;
      stats.add(r);
    }
    auto found = kinds(stats);
    ASSERT_TRUE(found.count("straggler"));
    EXPECT_NE(found["straggler"].find("slow in 100% of the steps"), std::string::npos)
        << found["straggler"];
  }
  // Balanced: compute-bound, nothing else.
  auto balanced = kinds(steps(0.0, 0.003, 0.006, 0.0001, 0.0));
  EXPECT_TRUE(balanced.count("compute_bound"));
  EXPECT_EQ(balanced.size(), 1u);

  // Memory: 95% of capacity is pressure; a small peak leaves headroom.
  monitor::RunStats stats = steps(0.0, 0.003, 0.006, 0.0, 0.0);
  monitor::DeviceMemory tight{.device = "cpu:0", .peak_total = 950, .capacity = 1000};
  tight.peak[static_cast<int>(MemoryCategory::activations)] = 500;
  monitor::DeviceMemory roomy{.device = "cpu:1", .peak_total = 100, .capacity = 1000};
  roomy.peak[static_cast<int>(MemoryCategory::activations)] = 50;
  stats.set_memory({tight, roomy});
  auto memory = kinds(stats);
  ASSERT_TRUE(memory.count("memory_pressure"));
  EXPECT_NE(memory["memory_pressure"].find("cpu:0"), std::string::npos);
  ASSERT_TRUE(memory.count("memory_headroom"));
  // (1000 - (100 - 50)) / 50 = 19x larger activations fit.
  EXPECT_NE(memory["memory_headroom"].find("19x larger batch"), std::string::npos)
      << memory["memory_headroom"];
}

TEST(RunStats, MembershipChangesAreAFindingWithTheirCosts) {
  monitor::RunStats stats(/*warmup_steps=*/0);
  monitor::StepRecord r{.global_step = 1, .batch_examples = 128};
  r.replicas = {{.replica = 0, .forward = 0.003, .backward = 0.006}};
  r.step_seconds = 0.009;
  stats.add(r);
  const auto kinds = [&stats] {
    std::map<std::string, std::string> out;
    for (const auto& f : stats.diagnose()) out[f.kind] = f.message;
    return out;
  };
  EXPECT_FALSE(kinds().count("membership_changes"));
  stats.add_membership_change(1, 0, 3, 0.25);
  stats.add_membership_change(0, 2, 0, 1.5);
  auto found = kinds();
  ASSERT_TRUE(found.count("membership_changes"));
  EXPECT_NE(found["membership_changes"].find("changed 2 time(s) (1 worker(s) lost, 2 joined), "
                                             "1.75 s to go on and 3 step(s) taken again"),
            std::string::npos)
      << found["membership_changes"];
}

TEST(Monitor, MetricsLinesParseWithStableFields) {
  const std::string dir = fresh_dir("metrics");
  train::TrainConfig c = config(2);
  c.epochs = 2;
  c.eval_batch_size = 1024;  // 32x the training batch: evaluation sets the overall peak
  const json summary = monitored_run(dir, c, factory(), 160, {}, 1024);
  std::ifstream in(fs::path(dir) / "metrics.jsonl");
  int runs = 0, steps = 0, epochs = 0;
  int64_t epoch_activation_peak = 0;
  int64_t previous_step = 0;
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);  // throws when a line is not JSON
    const std::string type = j.at("type");
    if (type == "run") {
      ++runs;
      for (const char* key : {"model", "strategy", "replicas", "devices", "steps_per_epoch",
                              "peak_flops_per_device", "allreduce_backend"})
        EXPECT_TRUE(j.contains(key)) << key;
    } else if (type == "step") {
      ++steps;
      EXPECT_EQ(j.at("global_step").get<int64_t>(), previous_step + 1);
      previous_step = j.at("global_step").get<int64_t>();
      for (const char* key :
           {"epoch", "step", "time", "loss", "learning_rate", "batch_examples", "step_seconds",
            "input_seconds", "examples_per_second", "flops", "flops_per_second", "peak_fraction",
            "loss_scale", "skipped", "replicas", "allreduce", "memory", "rss_bytes"})
        EXPECT_TRUE(j.contains(key)) << key << " in " << line;
      EXPECT_GT(j.at("flops").get<double>(), 0.0);
      EXPECT_GT(j.at("rss_bytes").get<int64_t>(), 0);
      ASSERT_EQ(j.at("replicas").size(), 2u);
      for (const auto& r : j.at("replicas")) {
        for (const char* key : {"replica", "forward", "backward", "communication", "optimizer",
                                "idle", "busy_fraction"})
          EXPECT_TRUE(r.contains(key)) << key;
        EXPECT_GE(r.at("busy_fraction").get<double>(), 0.0);
        EXPECT_LE(r.at("busy_fraction").get<double>(), 1.0);
      }
      EXPECT_EQ(j.at("allreduce").at("backend"), "inprocess");
      for (const auto& b : j.at("allreduce").at("buckets")) {
        EXPECT_GT(b.at("bytes").get<int64_t>(), 0);
        EXPECT_EQ(b.at("algorithm"), "sliced");  // mlp buckets are far above 512 B
      }
      ASSERT_EQ(j.at("memory").size(), 2u);
      EXPECT_GT(j.at("memory")[1].at("peak_bytes").at("parameters").get<int64_t>(), 0);
      EXPECT_GT(j.at("memory")[1].at("bytes_in_use").at("gradients").get<int64_t>(), 0);
    } else if (type == "epoch") {
      ++epochs;
      epoch_activation_peak =
          std::max(epoch_activation_peak,
                   j.at("memory")[0].at("peak_bytes").at("activations").get<int64_t>());
      for (const char* key :
           {"epoch", "train_loss", "validation_accuracy", "examples_per_second", "time"})
        EXPECT_TRUE(j.contains(key)) << key;
    }
  }
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(steps, 10);
  EXPECT_EQ(epochs, 2);
  // Findings use training's peaks, not the larger evaluation batches'.
  const int64_t training_peak =
      summary.at("monitor").at("memory")[0].at("peak_bytes").at("activations").get<int64_t>();
  EXPECT_GT(training_peak, 0);
  EXPECT_LT(training_peak, epoch_activation_peak);
  const auto& m = summary.at("monitor");
  EXPECT_LE(m.at("step_seconds_p50").get<double>(), m.at("step_seconds_p90").get<double>());
  EXPECT_LE(m.at("step_seconds_p90").get<double>(), m.at("step_seconds_max").get<double>());
}

TEST(Monitor, AFullDiskStopsTheRecordWithAWarningNotTheRun) {
  // Failed writes were ignored: a full disk lost every record after it
  // without a word.
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const std::string dir = fresh_dir("full-disk");
  fs::create_symlink("/dev/full", fs::path(dir) / "metrics.jsonl");
  const json summary = monitored_run(dir, config(1), factory(), 96);
  std::string warnings;
  for (const auto& w : summary.at("monitor").at("warnings")) warnings += w.get<std::string>();
  EXPECT_NE(warnings.find("metrics.jsonl stopped: a write failed"), std::string::npos)
      << summary.at("monitor").dump();
}

TEST(Monitor, TraceWindowHasReplicaInputAndCommunicationTracks) {
  const std::string dir = fresh_dir("trace");
  monitored_run(dir, config(2), factory(), 320, {.trace_first = 3, .trace_last = 5});
  std::ifstream in(fs::path(dir) / "trace.json");
  const json trace = json::parse(in);
  std::map<int, std::string> tracks;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "M") tracks[e.at("tid").get<int>()] = e.at("args").at("name");
  std::map<std::string, std::map<std::string, int>> spans;  // track -> name -> count
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    ASSERT_TRUE(tracks.count(e.at("tid").get<int>()));
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    ++spans[tracks[e.at("tid").get<int>()]][e.at("name").get<std::string>()];
  }
  EXPECT_EQ(spans["replica 0"]["forward"], 3);  // steps 3, 4 and 5
  EXPECT_EQ(spans["replica 1"]["backward"], 3);
  EXPECT_EQ(spans["replica 1"]["optimizer"], 3);
  EXPECT_EQ(spans["input (main thread)"]["input"], 3);
  int all_reduces = 0;
  for (const auto& [track, names] : spans)
    if (track.rfind("communication", 0) == 0 && names.count("all_reduce"))
      all_reduces += names.at("all_reduce");
  EXPECT_GE(all_reduces, 3) << "no all_reduce spans on a communication track";
}

// The step line's fields are one table: the writer's lines hold exactly its
// fields, the reader takes them back, and the docs show the same table.
TEST(StepSchema, WriterReaderAndDocsFollowTheOneTable) {
  const std::string dir = fresh_dir("schema");
  monitored_run(dir, config(2), factory(), 96);
  std::ifstream in(fs::path(dir) / "metrics.jsonl");
  int steps = 0;
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    if (j.at("type") != "step") continue;
    ++steps;
    std::set<std::string> expected = {"type", "replicas", "allreduce", "memory"};
    for (const monitor::StepField& f : monitor::step_fields()) expected.insert(std::string(f.name));
    std::set<std::string> keys;
    for (const auto& [key, value] : j.items()) keys.insert(key);
    EXPECT_EQ(keys, expected);
    for (const auto& r : j.at("replicas")) EXPECT_EQ(r.size(), monitor::replica_fields().size());
    const monitor::StepRecord back = monitor::detail::step_from_json(j);
    for (const monitor::StepField& f : monitor::step_fields()) {
      if (j.at(std::string(f.name)).is_null()) continue;
      const double written = j.at(std::string(f.name)).is_boolean()
                                 ? (j.at(std::string(f.name)).get<bool>() ? 1.0 : 0.0)
                                 : j.at(std::string(f.name)).get<double>();
      EXPECT_EQ(f.get(back), written) << f.name;
    }
    ASSERT_EQ(back.replicas.size(), 2u);
    EXPECT_EQ(monitor::replica_fields()[1].get(back, 1), j.at("replicas")[1].at("forward"));
  }
  EXPECT_EQ(steps, 3);
  std::ifstream docs(fs::path(TANDEM_SOURCE_DIR) / "docs" / "monitoring.md");
  const std::string text(std::istreambuf_iterator<char>(docs), {});
  EXPECT_NE(text.find(monitor::step_schema_markdown()), std::string::npos)
      << "docs/monitoring.md must hold `tandem report --schema`'s table:\n"
      << monitor::step_schema_markdown();
}

// docs/monitoring.md's table of findings names every kind the monitor
// emits (read from the source: a finding is {"kind", fmt::format(...)}).
TEST(Findings, EveryKindIsInTheDocsTable) {
  const auto read = [](const fs::path& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string source =
      read(fs::path(TANDEM_SOURCE_DIR) / "src" / "tandem" / "monitor" / "run_stats.cc");
  const std::string docs = read(fs::path(TANDEM_SOURCE_DIR) / "docs" / "monitoring.md");
  const std::regex finding(R"re(\{"([a-z_]+)",\s*fmt::format)re");
  std::set<std::string> kinds;
  for (auto it = std::sregex_iterator(source.begin(), source.end(), finding);
       it != std::sregex_iterator(); ++it)
    kinds.insert((*it)[1]);
  EXPECT_GE(kinds.size(), 9u);  // the pattern still finds them
  for (const std::string& kind : kinds)
    EXPECT_NE(docs.find("| `" + kind + "` |"), std::string::npos)
        << "docs/monitoring.md's findings table lacks " << kind;
}

TEST(Report, MissingOrIncompleteRunDirectoriesSayWhatIsMissing) {
  const auto error_of = [](const std::string& dir) -> std::string {
    try {
      monitor::write_report(dir);
    } catch (const IoError& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string dir = fresh_dir("report_bad");
  EXPECT_NE(error_of(dir + "/absent").find("does not exist"), std::string::npos);
  EXPECT_NE(error_of(dir).find("metrics.jsonl' is missing"), std::string::npos);
  const std::string metrics = dir + "/metrics.jsonl";
  std::ofstream(metrics) << "{\"type\":\"epoch\",\"epoch\":1}\n";
  EXPECT_NE(error_of(dir).find("no run header"), std::string::npos);
  std::ofstream(metrics) << "{\"type\":\"run\",\"model\":\"mlp\"}\n";
  EXPECT_NE(error_of(dir).find("no step records"), std::string::npos);
  std::ofstream(metrics) << "{\"type\":\"run\",\"model\":\"mlp\"}\n{garbage\n{\"type\":\"step\"}\n";
  EXPECT_NE(error_of(dir).find("line 2"), std::string::npos);
  // Well-formed JSON with a field missing deep inside (found by the fuzzer:
  // it escaped as nlohmann's out_of_range, "internal error" in the CLI).
  std::ofstream(metrics)
      << "{\"type\":\"run\",\"model\":\"mlp\"}\n"
      << "{\"type\":\"step\",\"epoch\":1,\"step\":1,\"global_step\":1,\"time\":0.05,"
         "\"loss\":2.3,\"learning_rate\":0.05,\"batch_examples\":128,\"step_seconds\":0.05,"
         "\"input_seconds\":0.01,\"replicas\":[{\"replica\":0,\"forward\":0.01,"
         "\"backward\":0.02,\"communication\":0,\"optimizer\":0.001,\"idle\":0}],"
         "\"memory\":[{\"device\":\"cpu:0\"}]}\n"
      << "{\"type\":\"epoch\",\"epoch\":1}\n";
  // (Read with the step line, the memory's error names the line and key.)
  EXPECT_NE(error_of(dir).find("line 2 of"), std::string::npos) << error_of(dir);
  EXPECT_NE(error_of(dir).find("'bytes_in_use'"), std::string::npos) << error_of(dir);
}

// A number where an integer belongs that no integer type holds (1e38: found
// by the metrics fuzzer as undefined behaviour in the cast) or that is not
// whole is an error naming the field, never a cast.
TEST(Report, IntegerFieldsRefuseNumbersTheyCannotHold) {
  const std::string dir = fresh_dir("report_integers");
  const std::string metrics = dir + "/metrics.jsonl";
  const auto error_of = [&](const std::string& run, const std::string& step,
                            const std::string& replica) -> std::string {
    std::ofstream(metrics, std::ios::trunc)
        << "{\"type\":\"run\",\"model\":\"mlp\"" << run << "}\n"
        << "{\"type\":\"step\",\"epoch\":1,\"step\":1,\"global_step\":1" << step
        << ",\"time\":0.05,\"loss\":2.3,\"batch_examples\":128,\"step_seconds\":0.05,"
           "\"replicas\":[{\"replica\":0,\"forward\":0.01,\"busy_fraction\":0.5"
        << replica << "}]}\n";
    try {
      monitor::write_report(dir);
    } catch (const IoError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(error_of("", "", ""), "no error");
  EXPECT_EQ(error_of(",\"replicas\":1.0", ",\"rss_bytes\":3e6", ""), "no error");
  const std::string step_epoch = error_of("", ",\"epoch\":1.28e38", "");
  EXPECT_NE(step_epoch.find("line 2"), std::string::npos) << step_epoch;
  EXPECT_NE(step_epoch.find("'epoch'"), std::string::npos) << step_epoch;
  EXPECT_NE(error_of("", ",\"allreduce_bytes\":2.5", "").find("'allreduce_bytes'"),
            std::string::npos);
  const std::string replica = error_of("", "", ",\"replica\":1.28e38");
  EXPECT_NE(replica.find("'replica'"), std::string::npos) << replica;
  const std::string replica_int = error_of("", "", ",\"replica\":4294967296");
  EXPECT_NE(replica_int.find("'replica'"), std::string::npos) << replica_int;
  const std::string run = error_of(",\"replicas\":1.28e38", "", "");
  EXPECT_NE(run.find("'replicas'"), std::string::npos) << run;
  EXPECT_NE(error_of(",\"threads_per_replica\":-1e300", "", "").find("'threads_per_replica'"),
            std::string::npos);
}

// A resumed run's summary covers its earlier processes' steps too (it held
// only the last process's, and tandem report preferred it to the lines).
TEST(Monitor, AResumedRunsSummaryCoversTheWholeRun) {
  const std::string dir = fresh_dir("monitor_resumed");
  train::TrainConfig c = config(1);
  c.epochs = 2;
  c.output_dir = dir;
  c.stop_after_epochs = 1;
  monitored_run(dir, c, factory(), 160);  // 5 steps
  c.stop_after_epochs = 0;
  c.resume = true;
  const json summary = monitored_run(dir, c, factory(), 160, {.append = true});
  // 10 steps, the first 2 the warm-up.
  EXPECT_EQ(summary.at("monitor").at("measured_steps"), 8);
  EXPECT_EQ(summary.at("epochs"), 2);
  const std::string page = read_file(monitor::write_report(dir).path);
  EXPECT_NE(page.find("8 measured steps"), std::string::npos);
}

TEST(Report, ResumedAfterACutLineAndNonFiniteValuesStillReport) {
  const std::string dir = fresh_dir("report_resumed");
  monitored_run(dir, config(2), factory(), 160);
  fs::remove(fs::path(dir) / "summary.json");
  const std::string metrics = (fs::path(dir) / "metrics.jsonl").string();
  std::string text = read_file(metrics);
  text.resize(text.size() - 40);  // killed inside its last line
  std::ofstream(metrics, std::ios::trunc) << text;
  // The resumed run appends after the cut line, with a test loss that overflowed.
  {
    train::TrainConfig c = config(2);
    train::Trainer t(c, factory());
    monitor::Monitor m({.run_dir = dir, .append = true}, run_info(t, head(160)));
    train::EpochResult e{.epoch = 1, .validation_loss = std::numeric_limits<double>::infinity()};
    m.on_epoch(e);
  }
  const monitor::ReportResult report = monitor::write_report(dir);
  ASSERT_EQ(report.warnings.size(), 2u);
  EXPECT_NE(report.warnings[0].find("incomplete"), std::string::npos) << report.warnings[0];
  EXPECT_NE(read_file(report.path).find("svg"), std::string::npos);
}

// A fresh run in a directory an earlier (failed) run left: the earlier
// event files in the run's own tensorboard folder go with its
// metrics.jsonl (TensorBoard showed both runs as one); a resumed run keeps
// them, and a folder given elsewhere (a shared log directory) is left alone.
TEST(Monitor, AFreshRunReplacesTheEventFilesOfItsOwnFolder) {
  const std::string dir = fresh_dir("monitor-stale-events");
  const fs::path own = fs::path(dir) / "tensorboard", shared = fs::path(dir) / "logs";
  fs::create_directories(own);
  fs::create_directories(shared);
  const auto plant = [](const fs::path& folder) {
    std::ofstream(folder / "events.out.tfevents.1.old") << "earlier run";
    std::ofstream(folder / "notes.txt") << "not an event file";
  };
  plant(own);
  plant(shared);
  train::Trainer t(config(1), factory());
  const auto stale = [](const fs::path& folder) {
    return fs::exists(folder / "events.out.tfevents.1.old");
  };
  {
    monitor::Monitor resumed({.run_dir = dir, .append = true, .tensorboard_dir = own.string()},
                             run_info(t, head(160)));
  }
  EXPECT_TRUE(stale(own));
  {
    monitor::Monitor elsewhere({.run_dir = dir, .tensorboard_dir = shared.string()},
                               run_info(t, head(160)));
  }
  EXPECT_TRUE(stale(shared));
  {
    monitor::Monitor fresh({.run_dir = dir, .tensorboard_dir = own.string()},
                           run_info(t, head(160)));
  }
  EXPECT_FALSE(stale(own));
  EXPECT_TRUE(fs::exists(own / "notes.txt"));
}

TEST(Report, AKilledRunStillGetsAReportUpToItsLastWholeStep) {
  const std::string dir = fresh_dir("report_killed");
  monitored_run(dir, config(2), factory(), 320);
  fs::remove(fs::path(dir) / "summary.json");
  // Cut the file inside its last line, as a kill during a write would.
  const std::string metrics = (fs::path(dir) / "metrics.jsonl").string();
  std::string text = read_file(metrics);
  text.resize(text.size() - 40);
  std::ofstream(metrics, std::ios::trunc) << text;
  const monitor::ReportResult report = monitor::write_report(dir);
  ASSERT_EQ(report.warnings.size(), 2u);
  EXPECT_NE(report.warnings[0].find("incomplete"), std::string::npos);
  EXPECT_NE(report.warnings[1].find("summary.json is missing"), std::string::npos);
  EXPECT_GE(report.steps, 9);
  EXPECT_NE(read_file(report.path).find("summary.json is missing"), std::string::npos);
}

TEST(ModelFlops, LayersCountTheirAnalyticMultiplyAdds) {
  auto mlp = nn::make_model("mlp", {.seed = 1});
  const auto layers = monitor::layer_flops(*mlp, Shape{28, 28, 1});
  ASSERT_EQ(layers.size(), 4u);  // Flatten, Linear, Linear, Linear
  EXPECT_EQ(layers[0].forward_flops, 0.0);
  EXPECT_EQ(layers[1].forward_flops, 2.0 * 784 * 512);
  EXPECT_EQ(layers[2].forward_flops, 2.0 * 512 * 512);
  EXPECT_EQ(layers[3].forward_flops, 2.0 * 512 * 10);
  EXPECT_TRUE(mlp->is_training());  // restored
  // cnn's first convolution: 28x28 outputs x 32 channels x 3x3x1 inputs each.
  auto cnn = nn::make_model("cnn", {.seed = 1});
  const auto conv = monitor::layer_flops(*cnn, Shape{28, 28, 1});
  EXPECT_EQ(conv[0].forward_flops, 2.0 * 28 * 28 * 32 * 3 * 3 * 1) << conv[0].description;
  // A training step counts about three forwards: backward computes the input
  // and the weight gradients (the first layer's input gradient is skipped).
  train::TrainConfig c = config(1);
  c.batch_size = 32;
  train::Trainer t(c, factory());
  const auto forward = monitor::layer_flops(t.model(), Shape{28, 28, 1});
  double per_example = 0.0;
  for (const auto& l : forward) per_example += l.forward_flops;
  const int64_t before = kernels::flops_executed();
  t.fit(head(64));
  const double per_trained_example = static_cast<double>(kernels::flops_executed() - before) / 64;
  EXPECT_NEAR(per_trained_example, 3.0 * per_example - 2.0 * 784 * 512, 1.0);
}

TEST(SvgChart, DrawsSeriesAndSegmentsOrSaysNoData) {
  const std::string line = monitor::line_chart(
      {.id = "t",
       .title = "a <b>",
       .series = {{.name = "s", .color = "#000", .x = {1, 2, 3}, .y = {3, 1, 2}}}});
  EXPECT_NE(line.find("class=\"series\""), std::string::npos);
  EXPECT_NE(line.find("M"), std::string::npos);
  EXPECT_NE(line.find("a &lt;b&gt;"), std::string::npos);
  EXPECT_NE(monitor::line_chart({.id = "e", .title = "empty"}).find("no data"), std::string::npos);
  // Degenerate ranges and huge values draw (and terminate).
  for (double v : {0.0, 1e300, -1e-300, 5.0}) {
    const std::string one =
        monitor::line_chart({.id = "p",
                             .title = "p",
                             .series = {{.name = "s", .color = "#000", .x = {v, v}, .y = {v, v}}}});
    EXPECT_NE(one.find("class=\"series\""), std::string::npos) << v;
  }
  const std::string bars = monitor::stacked_bar_chart({.id = "b",
                                                       .title = "bars",
                                                       .unit = "ms",
                                                       .parts = {"x", "y"},
                                                       .colors = {"#111", "#222"},
                                                       .bars = {"r0"},
                                                       .values = {{1.0, 2.0}}});
  size_t segments = 0;
  for (size_t at = bars.find("class=\"segment\""); at != std::string::npos;
       at = bars.find("class=\"segment\"", at + 1))
    ++segments;
  EXPECT_EQ(segments, 2u);
}

}  // namespace
}  // namespace tandem
