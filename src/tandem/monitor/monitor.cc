#include "tandem/monitor/monitor.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tandem/base/error.h"
#include "tandem/base/trace.h"
#include "tandem/kernels/flops.h"
#include "tandem/monitor/detail/metrics_json.h"
#include "tandem/tensor/allocator.h"
#include "tandem/train/detail/epoch_json.h"

namespace tandem::monitor {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kMetricsFile = "metrics.jsonl";
constexpr const char* kTraceFile = "trace.json";

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int64_t resident_set_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages_total = 0, pages_resident = 0;
  if (!(statm >> pages_total >> pages_resident)) return 0;
  return pages_resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

Monitor::Monitor(MonitorOptions options, RunInfo info)
    : options_(std::move(options)), info_(std::move(info)), start_(Clock::now()) {
  if (options_.metrics_every < 1)
    TANDEM_THROW(InvalidArgument, "metrics interval must be at least 1 step, got ",
                 options_.metrics_every);
  if (options_.trace_first < 0 ||
      (options_.trace_first > 0 && options_.trace_last < options_.trace_first))
    TANDEM_THROW(InvalidArgument, "trace window must be FIRST:LAST with 1 <= FIRST <= LAST, got ",
                 options_.trace_first, ":", options_.trace_last);
  flops_at_last_step_ = kernels::flops_executed();
  if (!options_.run_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(options_.run_dir, error);
    if (error) {
      TANDEM_THROW(IoError, "cannot create output directory '", options_.run_dir,
                   "': ", error.message());
    }
    const std::string path = (std::filesystem::path(options_.run_dir) / kMetricsFile).string();
    metrics_ = std::fopen(path.c_str(), options_.append ? "a" : "w");
    if (metrics_ == nullptr) TANDEM_THROW(IoError, "cannot write '", path, "'");
    nlohmann::json devices = nlohmann::json::array();
    for (const Device& d : info_.devices) devices.push_back(d.to_string());
    write_line(nlohmann::json{{"type", "run"},
                              {"model", info_.model},
                              {"strategy", info_.strategy},
                              {"precision", info_.precision},
                              {"allreduce_backend", info_.backend},
                              {"replicas", info_.global_replicas},
                              {"first_replica", info_.first_replica},
                              {"threads_per_replica", info_.threads_per_replica},
                              {"devices", devices},
                              {"batch_size", info_.batch_size},
                              {"epochs", info_.epochs},
                              {"steps_per_epoch", info_.steps_per_epoch},
                              {"parameters", info_.parameters},
                              {"peak_flops_per_device", info_.peak_flops_per_device},
                              {"device_memory_bytes", info_.device_memory_bytes}}
                   .dump());
  }
  if (options_.trace_first == 1) start_trace();
}

Monitor::~Monitor() {
  try {
    finish();
  } catch (const std::exception&) {
    // A trace that cannot be written must not take the run down with it.
  }
  if (metrics_ != nullptr) std::fclose(metrics_);
}

void Monitor::write_line(const std::string& line) {
  if (metrics_ == nullptr) return;
  // One write per line, flushed: a killed run leaves whole lines.
  std::string buffer = line;
  buffer += '\n';
  std::fwrite(buffer.data(), 1, buffer.size(), metrics_);
  std::fflush(metrics_);
}

std::vector<DeviceMemory> Monitor::memory_snapshot() const {
  std::vector<DeviceMemory> out;
  for (const Device& d : info_.devices) {
    const MemoryStats s = allocator_for(d).stats();
    DeviceMemory m{.device = d.to_string(),
                   .in_use = s.current_bytes,
                   .peak = s.peak_bytes,
                   .peak_total = s.peak_total_bytes,
                   .capacity = info_.device_memory_bytes};
    out.push_back(m);
  }
  return out;
}

void Monitor::on_step(const train::StepInfo& s) {
  const Clock::time_point now = Clock::now();
  const int64_t flops_now = kernels::flops_executed();
  StepRecord record{.epoch = s.epoch,
                    .step = s.step,
                    .global_step = (s.epoch - 1) * s.steps_per_epoch + s.step,
                    .time = seconds_between(start_, now),
                    .loss = s.loss,
                    .learning_rate = s.learning_rate,
                    .batch_examples = s.batch_examples,
                    .step_seconds = s.step_seconds,
                    .input_seconds = s.input_seconds,
                    .flops = static_cast<double>(flops_now - flops_at_last_step_),
                    .loss_scale = s.loss_scale,
                    .skipped = s.skipped};
  flops_at_last_step_ = flops_now;
  for (size_t r = 0; r < s.replicas.size(); ++r) {
    const train::ReplicaStepTime& t = s.replicas[r];
    record.replicas.push_back({.replica = info_.first_replica + static_cast<int>(r),
                               .forward = t.forward,
                               .backward = t.backward,
                               .communication = t.communication,
                               .optimizer = t.optimizer,
                               .idle = t.idle});
  }
  for (const auto& b : s.buckets) {
    record.allreduce_bytes += b.wire_bytes;
    record.allreduce_seconds += b.seconds;
  }
  stats_.add(record);
  last_global_step_ = record.global_step;

  WindowStep w{.end = now, .seconds = s.step_seconds, .examples = s.batch_examples};
  for (const ReplicaTimes& r : record.replicas) w.busy.push_back(r.compute());
  window_.push_back(std::move(w));
  while (window_.size() > 1 && seconds_between(window_.front().end, now) > options_.window_seconds)
    window_.pop_front();

  if (metrics_ != nullptr &&
      (record.global_step % options_.metrics_every == 0 || s.step == s.steps_per_epoch)) {
    nlohmann::json line = detail::to_json(record);
    const std::vector<double> busy = busy_fractions();
    for (size_t r = 0; r < busy.size() && r < line["replicas"].size(); ++r)
      line["replicas"][r]["busy_fraction"] = busy[r];
    line["examples_per_second"] =
        s.step_seconds > 0.0 ? static_cast<double>(s.batch_examples) / s.step_seconds : 0.0;
    const double flops_per_second = s.step_seconds > 0.0 ? record.flops / s.step_seconds : 0.0;
    line["flops_per_second"] = flops_per_second;
    if (info_.peak_flops_per_device > 0.0 && !info_.devices.empty()) {
      line["peak_fraction"] = flops_per_second / (info_.peak_flops_per_device *
                                                  static_cast<double>(info_.devices.size()));
    }
    if (!s.buckets.empty()) {
      nlohmann::json buckets = nlohmann::json::array();
      for (const auto& b : s.buckets) {
        buckets.push_back(
            {{"bytes", b.wire_bytes},
             {"seconds", b.seconds},
             {"bus_bandwidth", allreduce_bus_bandwidth(static_cast<double>(b.wire_bytes), b.seconds,
                                                       info_.global_replicas)}});
      }
      line["allreduce"] = {{"backend", info_.backend}, {"buckets", buckets}};
    }
    nlohmann::json memory = nlohmann::json::array();
    for (const DeviceMemory& m : memory_snapshot()) memory.push_back(detail::to_json(m));
    line["memory"] = std::move(memory);
    line["rss_bytes"] = resident_set_bytes();
    write_line(line.dump());
  }

  if (tracing_ && record.global_step >= options_.trace_last) finish_trace();
  if (!tracing_ && !trace_written_ && options_.trace_first > 0 &&
      record.global_step + 1 >= options_.trace_first && record.global_step < options_.trace_last)
    start_trace();
}

void Monitor::on_epoch(const train::EpochResult& e) {
  flops_at_last_step_ = kernels::flops_executed();  // evaluation's work is not a step's
  stats_.set_memory(memory_snapshot());
  nlohmann::json line = e;
  line["type"] = "epoch";
  line["time"] = seconds_between(start_, Clock::now());
  nlohmann::json memory = nlohmann::json::array();
  for (const DeviceMemory& m : stats_.memory()) memory.push_back(detail::to_json(m));
  line["memory"] = std::move(memory);
  line["rss_bytes"] = resident_set_bytes();
  write_line(line.dump());
}

void Monitor::start_trace() {
  trace::take();  // drop anything recorded before the window
  trace_origin_ = Clock::now();
  trace::set_enabled(true);
  tracing_ = true;
}

void Monitor::finish_trace() {
  trace::set_enabled(false);
  tracing_ = false;
  trace_written_ = true;
  const auto threads = trace::take();
  if (options_.run_dir.empty()) return;
  trace::write_chrome_trace((std::filesystem::path(options_.run_dir) / kTraceFile).string(),
                            threads, trace_origin_);
}

void Monitor::finish() {
  if (tracing_) finish_trace();
  if (stats_.memory().empty() && !info_.devices.empty()) stats_.set_memory(memory_snapshot());
}

std::vector<double> Monitor::busy_fractions() const {
  std::vector<double> busy;
  double wall = 0.0;
  for (const WindowStep& w : window_) {
    wall += w.seconds;
    if (busy.size() < w.busy.size()) busy.resize(w.busy.size(), 0.0);
    for (size_t r = 0; r < w.busy.size(); ++r) busy[r] += w.busy[r];
  }
  for (double& b : busy) b = wall > 0.0 ? std::min(1.0, b / wall) : 0.0;
  return busy;
}

double Monitor::recent_examples_per_second() const {
  double seconds = 0.0, examples = 0.0;
  for (const WindowStep& w : window_)
    seconds += w.seconds, examples += static_cast<double>(w.examples);
  return seconds > 0.0 ? examples / seconds : 0.0;
}

double Monitor::recent_step_seconds() const {
  double seconds = 0.0;
  for (const WindowStep& w : window_) seconds += w.seconds;
  return window_.empty() ? 0.0 : seconds / static_cast<double>(window_.size());
}

std::string Monitor::summary_json() const {
  nlohmann::json replicas = nlohmann::json::array();
  for (const ReplicaTimes& r : stats_.replica_means()) replicas.push_back(detail::to_json(r));
  nlohmann::json memory = nlohmann::json::array();
  for (const DeviceMemory& m : stats_.memory()) memory.push_back(detail::to_json(m));
  nlohmann::json findings = nlohmann::json::array();
  for (const Finding& f : stats_.diagnose())
    findings.push_back({{"kind", f.kind}, {"message", f.message}, {"value", f.value}});
  const double flops = stats_.flops_per_second();
  const double devices = static_cast<double>(std::max<size_t>(1, info_.devices.size()));
  nlohmann::json j = {
      {"measured_steps", stats_.measured_steps()},
      {"mean_step_seconds", stats_.mean_step_seconds()},
      {"steps_per_second",
       stats_.mean_step_seconds() > 0.0 ? 1.0 / stats_.mean_step_seconds() : 0.0},
      {"examples_per_second", stats_.examples_per_second()},
      {"input_fraction", stats_.input_fraction()},
      {"communication_fraction", stats_.communication_fraction()},
      {"idle_fraction", stats_.idle_fraction()},
      {"replicas", replicas},
      {"flops_per_second", flops},
      {"peak_flops_per_device", info_.peak_flops_per_device},
      {"peak_fraction",
       info_.peak_flops_per_device > 0.0 ? flops / (info_.peak_flops_per_device * devices) : 0.0},
      {"allreduce_backend", info_.backend},
      {"allreduce_bus_bandwidth",
       allreduce_bus_bandwidth(stats_.allreduce_bytes_per_second(), 1.0, info_.global_replicas)},
      {"memory", memory},
      {"rss_bytes", resident_set_bytes()},
      {"findings", findings}};
  return j.dump();
}

}  // namespace tandem::monitor
