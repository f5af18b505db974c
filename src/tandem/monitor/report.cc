#include "tandem/monitor/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "tandem/base/atomic_file.h"
#include "tandem/base/detail/json_integer.h"
#include "tandem/base/error.h"
#include "tandem/monitor/detail/metrics_json.h"
#include "tandem/monitor/detail/run_files.h"
#include "tandem/monitor/svg_chart.h"
#include "tandem/train/run_directory.h"

namespace tandem::monitor {
namespace {

using detail::RunFiles;
using detail::StepLine;

namespace fs = std::filesystem;
using nlohmann::json;

const std::vector<std::string> kPartColors = {"#9c9c9c", "#4e79a7", "#f28e2b",
                                              "#e15759", "#76b7b2", "#d9d9d9"};
const std::vector<std::string> kCategoryColors = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                                  "#b07aa1", "#edc948", "#9c755f"};
static_assert(kMemoryCategoryCount == 7, "give the new memory category a colour in the report");
const std::vector<std::string> kSeriesColors = {"#4e79a7", "#e15759", "#59a14f", "#f28e2b",
                                                "#b07aa1", "#76b7b2", "#edc948", "#9c755f"};

std::string figure(double value, const char* unit) {
  if (value >= 1e12) return fmt::format("{:.2f} T{}", value / 1e12, unit);
  if (value >= 1e9) return fmt::format("{:.2f} G{}", value / 1e9, unit);
  if (value >= 1e6) return fmt::format("{:.2f} M{}", value / 1e6, unit);
  if (value >= 1e3) return fmt::format("{:.1f} k{}", value / 1e3, unit);
  return fmt::format("{:.3g} {}", value, unit);
}

// Moving average over a window sized for about 150 points across the run.
std::vector<double> smoothed(const std::vector<double>& v) {
  const size_t window = std::max<size_t>(1, v.size() / 150);
  std::vector<double> out(v.size());
  double sum = 0.0;
  for (size_t i = 0; i < v.size(); ++i) {
    sum += v[i];
    if (i >= window) sum -= v[i - window];
    out[i] = sum / static_cast<double>(std::min(i + 1, window));
  }
  return out;
}

std::string row(const std::string& name, const std::string& value) {
  return fmt::format("<tr><th>{}</th><td>{}</td></tr>", html_escape(name), html_escape(value));
}

// The run's aggregate figures, from whichever source the report uses.
struct Figures {
  int64_t measured_steps = 0;
  double mean_step_seconds = 0.0;
  double step_p50 = 0.0, step_p90 = 0.0, step_max = 0.0;
  double input_fraction = 0.0;
  double examples_per_second = 0.0;
  double flops_per_second = 0.0;
  double allreduce_bus_bandwidth = 0.0;
  std::vector<ReplicaTimes> replicas;
  std::vector<Finding> findings;
  std::vector<DeviceMemory> memory;
};

using detail::number_or_nan;

Figures figures_from_stats(const RunStats& stats, int replicas) {
  Figures f;
  f.measured_steps = stats.measured_steps();
  f.mean_step_seconds = stats.mean_step_seconds();
  f.step_p50 = stats.step_seconds_quantile(0.5);
  f.step_p90 = stats.step_seconds_quantile(0.9);
  f.step_max = stats.step_seconds_quantile(1.0);
  f.input_fraction = stats.input_fraction();
  f.examples_per_second = stats.examples_per_second();
  f.flops_per_second = stats.flops_per_second();
  f.allreduce_bus_bandwidth =
      allreduce_bus_bandwidth(stats.allreduce_bytes_per_second(), 1.0, replicas);
  f.replicas = stats.replica_means();
  f.findings = stats.diagnose();
  f.memory = stats.memory();
  return f;
}

Figures figures_from_summary(const json& m) {
  Figures f;
  f.measured_steps = tandem::detail::json_integer_or(m, "measured_steps", int64_t{0});
  f.mean_step_seconds = number_or_nan(m, "mean_step_seconds");
  f.step_p50 = number_or_nan(m, "step_seconds_p50");
  f.step_p90 = number_or_nan(m, "step_seconds_p90");
  f.step_max = number_or_nan(m, "step_seconds_max");
  f.input_fraction = number_or_nan(m, "input_fraction");
  f.examples_per_second = number_or_nan(m, "examples_per_second");
  f.flops_per_second = number_or_nan(m, "flops_per_second");
  f.allreduce_bus_bandwidth = number_or_nan(m, "allreduce_bus_bandwidth");
  for (const auto& r : m.value("replicas", json::array()))
    f.replicas.push_back(detail::replica_times_from_json(r));
  for (const auto& x : m.value("findings", json::array())) {
    f.findings.push_back({x.value("kind", ""), x.value("message", ""), number_or_nan(x, "value")});
  }
  for (const auto& d : m.value("memory", json::array()))
    f.memory.push_back(detail::device_memory_from_json(d));
  return f;
}

// The page for a run's files. Throws nlohmann::json::exception for a field
// that is missing or of the wrong type (write_report names the run).
// What the report's sections read: the run's files and the figures made
// from them.
struct ReportContext {
  const RunFiles& files;
  Figures figures;
  std::string metric;     // the run's first metric; empty when it has none
  int64_t per_epoch = 0;  // steps per epoch
  int replicas = 1;
};

// summary.json's monitor section when the run finished and it covers every
// logged step (the monitor saw each step, where metrics.jsonl may hold
// every Nth); otherwise recomputed from the step lines (a killed run, or a
// summary written by a resumed process that counted only its own steps).
Figures run_figures(const RunFiles& files) {
  if (!files.summary.is_null() && files.summary.contains("monitor")) {
    Figures f = figures_from_summary(files.summary.at("monitor"));
    if (f.measured_steps + RunStats::kDefaultWarmupSteps >=
        static_cast<int64_t>(files.steps.size()))
      return f;
  }
  RunStats stats;
  for (const auto& [step, line] : files.steps) stats.add(line.record);
  for (const json& c : files.membership_changes) {
    stats.add_membership_change(static_cast<int>(c.value("lost", json::array()).size()),
                                static_cast<int>(c.value("joined", json::array()).size()),
                                tandem::detail::json_integer_or(c, "rolled_back_steps", int64_t{0}),
                                c.value("seconds", 0.0));
  }
  stats.set_memory(files.training_memory);
  return figures_from_stats(stats, tandem::detail::json_integer_or(files.run, "replicas", 1));
}

// The run's first metric (the epoch records list the metrics they carry).
std::string first_metric(const RunFiles& files) {
  if (files.epochs.empty()) return "";
  const nlohmann::json& names = files.epochs.begin()->second.value("metrics", nlohmann::json());
  return names.is_array() && !names.empty() && names[0].is_string() ? names[0].get<std::string>()
                                                                    : "";
}

// The step time per replica, ms, by part.
std::string breakdown_chart(const Figures& figures) {
  StackedBarSpec breakdown{
      .id = "breakdown",
      .title = "Step time per replica (mean over measured steps)",
      .unit = "ms per step",
      .parts = {"input", "forward", "backward", "communication", "optimizer", "idle"},
      .colors = kPartColors};
  const double input_ms = 1e3 * figures.input_fraction * figures.mean_step_seconds;
  for (const ReplicaTimes& r : figures.replicas) {
    breakdown.bars.push_back(fmt::format("replica {}", r.replica));
    breakdown.values.push_back({input_ms, 1e3 * r.forward, 1e3 * r.backward, 1e3 * r.communication,
                                1e3 * r.optimizer, 1e3 * r.idle});
  }
  return stacked_bar_chart(breakdown);
}

// Each device's peak memory by category.
std::string memory_chart(const std::vector<DeviceMemory>& memory) {
  StackedBarSpec chart{
      .id = "memory", .title = "Peak memory by category per device", .unit = "MiB"};
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    chart.parts.emplace_back(memory_category_name(static_cast<MemoryCategory>(c)));
    chart.colors.push_back(kCategoryColors[static_cast<size_t>(c)]);
  }
  for (const DeviceMemory& m : memory) {
    chart.bars.push_back(m.device);
    std::vector<double> v;
    for (int c = 0; c < kMemoryCategoryCount; ++c)
      v.push_back(static_cast<double>(m.peak[c]) / (1 << 20));
    chart.values.push_back(std::move(v));
  }
  return stacked_bar_chart(chart);
}

// The line and bar charts.
std::string charts_section(const ReportContext& context) {
  const RunFiles& files = context.files;
  const Figures& figures = context.figures;
  const std::string& metric = context.metric;
  const int64_t per_epoch = context.per_epoch;
  const bool percent = metric.ends_with("accuracy");
  // Curves.
  Series loss{.name = "training loss (per step)", .color = kSeriesColors[0]};
  Series examples{.name = "examples/s", .color = kSeriesColors[0]};
  Series noise{.name = "noise scale B_simple", .color = kSeriesColors[0]};
  Series batch{.name = "global batch", .color = kSeriesColors[1]};
  std::vector<double> rates;
  std::map<int, Series> busy;
  for (const auto& [step, line] : files.steps) {
    loss.x.push_back(static_cast<double>(step));
    loss.y.push_back(line.record.loss);
    if (std::isfinite(line.record.noise_scale)) {
      noise.x.push_back(static_cast<double>(step));
      noise.y.push_back(line.record.noise_scale);
      batch.x.push_back(static_cast<double>(step));
      batch.y.push_back(static_cast<double>(line.record.batch_examples));
    }
    examples.x.push_back(line.record.time);
    rates.push_back(line.record.step_seconds > 0.0
                        ? static_cast<double>(line.record.batch_examples) / line.record.step_seconds
                        : 0.0);
    const json& reps = line.extra.at("replicas");
    for (const auto& r : reps) {
      if (!r.contains("busy_fraction")) continue;
      const int id = tandem::detail::json_integer<int>(r.at("replica"), "'replica'");
      Series& s = busy[id];
      if (s.name.empty()) {
        s.name = fmt::format("replica {}", id);
        s.color = kSeriesColors[static_cast<size_t>(busy.size() - 1) % kSeriesColors.size()];
      }
      s.x.push_back(line.record.time);
      s.y.push_back(r.at("busy_fraction").get<double>());
    }
  }
  examples.y = smoothed(rates);
  // Per epoch: the validation loss, and the run's first metric (the
  // epoch records list the metrics they carry).
  Series validation_loss{
      .name = "validation loss (per epoch)", .color = kSeriesColors[1], .markers = true};
  Series train_metric{.name = "train", .color = kSeriesColors[0], .markers = true};
  Series validation_metric{.name = "validation", .color = kSeriesColors[1], .markers = true};
  for (const auto& [epoch, e] : files.epochs) {
    validation_loss.x.push_back(static_cast<double>(epoch * per_epoch));
    validation_loss.y.push_back(number_or_nan(e, "validation_loss"));
    if (metric.empty()) continue;
    train_metric.x.push_back(static_cast<double>(epoch));
    train_metric.y.push_back(number_or_nan(e, ("train_" + metric).c_str()));
    validation_metric.x.push_back(static_cast<double>(epoch));
    validation_metric.y.push_back(number_or_nan(e, ("validation_" + metric).c_str()));
  }
  std::vector<Series> busy_series;
  for (auto& [id, s] : busy) busy_series.push_back(std::move(s));

  std::string charts;
  charts += line_chart({.id = "loss",
                        .title = "Loss",
                        .x_label = "global step",
                        .y_label = "loss",
                        .series = {loss, validation_loss}});
  if (!metric.empty()) {
    charts += line_chart({.id = "metric",
                          .title = metric + " per epoch",
                          .x_label = "epoch",
                          .y_label = metric,
                          .series = {train_metric, validation_metric},
                          .y_from_zero = false,
                          .percent = percent});
  }
  charts += line_chart({.id = "throughput",
                        .title = "Throughput over time",
                        .x_label = "seconds since start",
                        .y_label = "examples/s",
                        .series = {examples}});
  charts += line_chart({.id = "utilisation",
                        .title = "Device utilisation (busy fraction, sliding window)",
                        .x_label = "seconds since start",
                        .y_label = "busy",
                        .series = busy_series,
                        .y_max = 1.0,
                        .percent = true});
  if (!noise.x.empty()) {
    charts += line_chart({.id = "noise_scale",
                          .title = "Gradient noise scale (examples) against the batch",
                          .x_label = "global step",
                          .y_label = "examples",
                          .series = {noise, batch}});
  }
  charts += breakdown_chart(figures);
  charts += memory_chart(figures.memory);
  return charts;
}

// The last finite gradient noise scale and the global batch of its step,
// or NaNs.
std::pair<double, double> last_noise_scale(const RunFiles& files) {
  for (auto it = files.steps.rbegin(); it != files.steps.rend(); ++it) {
    if (std::isfinite(it->second.record.noise_scale)) {
      return {it->second.record.noise_scale, static_cast<double>(it->second.record.batch_examples)};
    }
  }
  return {NAN, NAN};
}

// The table of key figures at the top.
std::string key_figures_table(const ReportContext& c) {
  const RunFiles& files = c.files;
  const json& run = files.run;
  const Figures& figures = c.figures;
  const std::string& metric = c.metric;
  const int64_t per_epoch = c.per_epoch;
  const int replicas = c.replicas;
  const double recorded_peak = number_or_nan(run, "peak_flops_per_device");
  const double peak =  // 0: unknown
      std::isfinite(recorded_peak) && recorded_peak > 0.0 ? recorded_peak : 0.0;
  const auto devices =
      static_cast<double>(std::max<size_t>(1, run.value("devices", json::array()).size()));
  std::string table;
  table +=
      row("model", fmt::format("{} ({} parameters)", run.value("model", "?"),
                               tandem::detail::json_integer_or(run, "parameters", int64_t{0})));
  table +=
      row("strategy", fmt::format("{}: {} replica(s) x {} thread(s), precision {}, global "
                                  "batch {}",
                                  run.value("strategy", "?"), replicas,
                                  tandem::detail::json_integer_or(run, "threads_per_replica", 1),
                                  run.value("precision", "?"),
                                  tandem::detail::json_integer_or(run, "batch_size", int64_t{0})));
  const auto& last_step = files.steps.rbegin()->second.record;
  table += row("progress", fmt::format("epoch {} step {} of {} epochs x {} steps ({} step "
                                       "records)",
                                       last_step.epoch, last_step.step,
                                       tandem::detail::json_integer_or(run, "epochs", int64_t{0}),
                                       per_epoch, files.steps.size()));
  const bool percent = metric.ends_with("accuracy");
  const auto metric_figure = [&](double v) {
    return percent ? fmt::format("{:.2f}%", 100.0 * v) : fmt::format("{:.4g}", v);
  };
  if (!metric.empty() && !files.summary.is_null() &&
      files.summary.contains("validation_" + metric)) {
    table += row(
        "final validation " + metric,
        fmt::format("{} (loss {:.4f})",
                    metric_figure(number_or_nan(files.summary, ("validation_" + metric).c_str())),
                    number_or_nan(files.summary, "validation_loss")));
  } else if (!metric.empty() && !files.epochs.empty()) {
    table += row("last validation " + metric,
                 fmt::format("{} (epoch {})",
                             metric_figure(number_or_nan(files.epochs.rbegin()->second,
                                                         ("validation_" + metric).c_str())),
                             files.epochs.rbegin()->first));
  }
  const double step_s = figures.mean_step_seconds;
  table +=
      row("throughput", fmt::format("{:.0f} examples/s, {:.2f} steps/s ({:.2f} ms per step, "
                                    "{} measured steps)",
                                    figures.examples_per_second, step_s > 0.0 ? 1.0 / step_s : 0.0,
                                    1e3 * step_s, figures.measured_steps));
  if (std::isfinite(figures.step_p50) && figures.step_p50 > 0.0) {
    table += row("step time", fmt::format("median {:.2f} ms, 90th percentile {:.2f} ms, slowest "
                                          "{:.2f} ms",
                                          1e3 * figures.step_p50, 1e3 * figures.step_p90,
                                          1e3 * figures.step_max));
  }
  table += row("achieved compute",
               peak > 0.0 ? fmt::format("{} ({:.0f}% of the measured matmul peak, {} per device)",
                                        figure(figures.flops_per_second, "FLOP/s"),
                                        100.0 * figures.flops_per_second / (peak * devices),
                                        figure(peak, "FLOP/s"))
                          : figure(figures.flops_per_second, "FLOP/s"));
  if (replicas > 1) {
    table += row("all-reduce", fmt::format("{} backend, bus bandwidth {} over the run",
                                           run.value("allreduce_backend", "?"),
                                           figure(figures.allreduce_bus_bandwidth, "B/s")));
  }
  const json& last_line = files.steps.rbegin()->second.extra;
  if (last_line.contains("rss_bytes"))
    table += row("process memory (RSS)", figure(number_or_nan(last_line, "rss_bytes"), "B"));
  if (const auto [noise, batch] = last_noise_scale(files); std::isfinite(noise)) {
    table += row("gradient noise scale",
                 fmt::format("about {:.0f} examples (B_simple, smoothed; global batch {:.0f})",
                             noise, batch));
  }
  return table;
}

// Model FLOPs per example by layer (run.json), when recorded.
std::string layers_section(const json& run) {
  std::string layers;
  if (run.contains("layers") && !run.at("layers").empty()) {
    double total = 0.0;
    for (const auto& l : run.at("layers")) total += number_or_nan(l, "forward_flops_per_example");
    layers +=
        "<h2>Model FLOPs per example, forward (analytic, by layer)</h2><table "
        "class=\"figures\"><tr><th>layer</th><th>module</th><th>MFLOP</th><th>share</th></tr>";
    for (const auto& l : run.at("layers")) {
      const double f = number_or_nan(l, "forward_flops_per_example");
      if (!(f > 0.0)) continue;
      layers +=
          fmt::format("<tr><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.1f}%</td></tr>",
                      html_escape(l.value("layer", "")), html_escape(l.value("description", "")),
                      f / 1e6, total > 0.0 ? 100.0 * f / total : 0.0);
    }
    layers += fmt::format("<tr><th>total</th><td></td><th>{:.3f}</th><td></td></tr></table>",
                          total / 1e6);
  }
  return layers;
}

// The last logged step's all-reduce buckets.
std::string buckets_section(const RunFiles& files) {
  json last_allreduce;
  for (const auto& [step, line] : files.steps)
    if (line.extra.contains("allreduce")) last_allreduce = line.extra.at("allreduce");
  std::string buckets;
  if (last_allreduce.is_object()) {
    buckets +=
        "<h2>All-reduce buckets (last logged step)</h2><table class=\"figures\"><tr><th>"
        "bucket</th><th>wire bytes</th><th>algorithm</th><th>time</th><th>bus bandwidth</th></tr>";
    int i = 0;
    for (const auto& b : last_allreduce.at("buckets")) {
      buckets += fmt::format(
          "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.3f} ms</td><td>{}</td></tr>", i++,
          figure(number_or_nan(b, "bytes"), "B"), html_escape(b.value("algorithm", "")),
          1e3 * number_or_nan(b, "seconds"), figure(number_or_nan(b, "bus_bandwidth"), "B/s"));
    }
    buckets += "</table>";
  }
  return buckets;
}

// The memory plan (summary.json): each device's predicted peak by category
// beside what its allocator measured over the run.
std::string memory_plan_section(const json& summary) {
  std::string plan;
  if (summary.is_object() && summary.contains("memory_plan")) {
    const json& p = summary.at("memory_plan");
    plan += fmt::format(
        "<h2>Memory plan: predicted and measured peaks (micro-batch {})</h2><table "
        "class=\"figures\"><tr><th>device</th><th>category</th><th>predicted</th><th>measured</"
        "th><th>predicted / measured</th></tr>",
        tandem::detail::json_integer_or(p, "micro_batch", int64_t{0}));
    for (const auto& d : p.value("devices", json::array())) {
      const auto row = [&](const std::string& what, double predicted, double measured) {
        // Nothing measured (a category the run never used): no ratio.
        const std::string ratio =
            measured > 0 ? fmt::format("{:.3f}", predicted / measured) : std::string("-");
        plan += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                            html_escape(d.value("device", "")), html_escape(what),
                            figure(predicted, "B"), figure(measured, "B"), ratio);
      };
      row("peak", number_or_nan(d, "predicted_peak_bytes"),
          number_or_nan(d, "measured_peak_bytes"));
      const json none = json::object();
      const json& predicted = d.contains("predicted_bytes") ? d.at("predicted_bytes") : none;
      const json& measured = d.contains("measured_bytes") ? d.at("measured_bytes") : none;
      for (int c = 0; c < kMemoryCategoryCount; ++c) {
        const std::string name(memory_category_name(static_cast<MemoryCategory>(c)));
        row(name, number_or_nan(predicted, name.c_str()), number_or_nan(measured, name.c_str()));
      }
    }
    plan += "</table>";
  }
  return plan;
}

// The last epoch's input pipeline stages.
std::string pipeline_section(const RunFiles& files) {
  std::string pipeline;
  for (auto it = files.epochs.rbegin(); it != files.epochs.rend(); ++it) {
    if (!it->second.contains("input_pipeline")) continue;
    pipeline += fmt::format(
        "<h2>Input pipeline (to epoch {})</h2><table class=\"figures\"><tr><th>stage</th>"
        "<th>elements</th><th>busy</th><th>waiting for input</th><th>mean buffer</th>"
        "<th>capacity</th></tr>",
        it->first);
    for (const auto& stage : it->second.at("input_pipeline")) {
      pipeline += fmt::format(
          "<tr><td>{}</td><td>{}</td><td>{:.3f} s</td><td>{:.3f} s</td><td>{:.1f}</td>"
          "<td>{}</td></tr>",
          html_escape(stage.value("stage", "")),
          tandem::detail::json_integer_or(stage, "elements", int64_t{0}),
          number_or_nan(stage, "busy_seconds"), number_or_nan(stage, "wait_seconds"),
          number_or_nan(stage, "mean_buffer"),
          tandem::detail::json_integer_or(stage, "buffer_capacity", int64_t{0}));
    }
    pipeline += "</table>";
    break;
  }
  return pipeline;
}

// Asynchronous training: each epoch's staleness histogram and dropped examples.
std::string staleness_section(const RunFiles& files) {
  std::string staleness;
  for (const auto& [epoch, e] : files.epochs) {
    if (!e.contains("staleness") && !e.contains("dropped_examples")) continue;
    if (staleness.empty()) {
      staleness =
          "<h2>Staleness of applied gradients</h2><table class=\"figures\"><tr><th>epoch</th>"
          "<th>applied</th><th>mean staleness</th><th>histogram (staleness 0, 1, ...)</th>"
          "<th>dropped examples per replica</th></tr>";
    }
    int64_t applied = 0;
    std::string histogram, dropped;
    for (const auto& n : e.value("staleness", json::array())) {
      const auto count = tandem::detail::json_integer<int64_t>(n, "a staleness count");
      applied += count;
      histogram += (histogram.empty() ? "" : ", ") + std::to_string(count);
    }
    for (const auto& n : e.value("dropped_examples", json::array()))
      dropped += (dropped.empty() ? "" : ", ") +
                 std::to_string(tandem::detail::json_integer<int64_t>(n, "a dropped count"));
    staleness +=
        fmt::format("<tr><td>{}</td><td>{}</td><td>{:.2f}</td><td>{}</td><td>{}</td></tr>", epoch,
                    applied, number_or_nan(e, "mean_staleness"), histogram, dropped);
  }
  if (!staleness.empty()) staleness += "</table>";
  return staleness;
}

ReportResult render_report(RunFiles files, const std::string& run_dir, const std::string& output) {
  ReportResult result;
  result.path = output.empty() ? train::RunDirectory(run_dir).report() : output;
  result.warnings = files.warnings;
  result.steps = static_cast<int64_t>(files.steps.size());
  const ReportContext context{
      .files = files,
      .figures = run_figures(files),
      .metric = first_metric(files),
      .per_epoch = tandem::detail::json_integer_or(files.run, "steps_per_epoch", int64_t{0}),
      .replicas = tandem::detail::json_integer_or(files.run, "replicas", 1)};
  result.findings = context.figures.findings;
  std::string findings;
  for (const Finding& f : result.findings) {
    findings += fmt::format("<li class=\"finding {}\"><b>{}</b>: {}</li>", html_escape(f.kind),
                            html_escape(f.kind), html_escape(f.message));
  }
  std::string warnings;
  for (const std::string& w : result.warnings)
    warnings += fmt::format("<p class=\"warning\">{}</p>", html_escape(w));
  const std::string charts = charts_section(context);
  int chart_count = 0;  // for the headless check's count of drawn charts
  for (size_t at = charts.find("class=\"chart\""); at != std::string::npos;
       at = charts.find("class=\"chart\"", at + 1))
    ++chart_count;
  const std::string table = key_figures_table(context);
  const std::string sections = layers_section(files.run) + memory_plan_section(files.summary) +
                               pipeline_section(files) + staleness_section(files) +
                               buckets_section(files);

  const std::string title =
      fmt::format("tandem run report: {}", fs::path(run_dir).filename().string());
  std::string html = fmt::format(
      R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{0}</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; max-width: 1200px; }}
h1 {{ font-size: 20px; }} h2 {{ font-size: 16px; margin-top: 28px; }}
table.figures {{ border-collapse: collapse; }}
table.figures th, table.figures td {{ text-align: left; padding: 3px 12px 3px 0; font-size: 13px; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 16px; }}
svg.chart {{ border: 1px solid #ddd; font-family: sans-serif; }}
li.finding {{ margin: 4px 0; font-size: 14px; }}
p.warning {{ color: #a33; }}
</style></head>
<body data-charts="{8}">
<h1>{0}</h1>
{1}
<table class="figures">{2}</table>
<h2>Findings</h2>
<ul>{3}</ul>
<h2>Charts</h2>
<div class="charts">{4}</div>
{5}
<p style="font-size:12px;color:#777">From metrics.jsonl{6} in {7}. Means leave out the first
steps (primitive creation and allocator warm-up).</p>
<script>
// For headless checks: count the charts that drew something.
addEventListener('load', () => {{
  let drawn = 0;
  for (const svg of document.querySelectorAll('svg.chart')) {{
    const marks = svg.querySelectorAll('.series, .segment');
    if ([...marks].some(m => {{ const b = m.getBBox(); return b.width > 0 || b.height > 0; }}))
      drawn++;
  }}
  document.body.dataset.drawn = drawn;
}});
</script>
</body></html>
)",
      html_escape(title), warnings, table, findings, charts, sections,
      files.summary.is_null() ? "" : " and summary.json", html_escape(run_dir), chart_count);
  // Through a temporary of its own, synced and renamed: two reports of one
  // path shared a fixed PATH.partial, and a full disk's short write was
  // renamed into place unchecked.
  const std::string_view parts[] = {html};
  write_file_atomically(result.path, parts, "report");
  return result;
}

}  // namespace

ReportResult write_report(const std::string& run_dir, const std::string& output) {
  RunFiles files = detail::read_run(run_dir);
  try {
    return render_report(std::move(files), run_dir, output);
  } catch (const json::exception& e) {
    TANDEM_THROW(IoError, "'", run_dir,
                 "' holds a record with a missing or mistyped field (metrics.jsonl or "
                 "summary.json): ",
                 e.what());
  }
}

}  // namespace tandem::monitor
