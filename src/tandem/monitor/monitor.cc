#include "tandem/monitor/monitor.h"

#include "tandem/monitor/step_schema.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/trace.h"
#include "tandem/interop/tensorboard.h"
#include "tandem/kernels/backend_info.h"
#include "tandem/kernels/flops.h"
#include "tandem/monitor/detail/metrics_json.h"
#include "tandem/monitor/detail/run_files.h"
#include "tandem/tensor/allocator.h"
#include "tandem/train/detail/epoch_json.h"
#include "tandem/train/run_directory.h"

namespace tandem::monitor {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A double as JSON: shortest round-trip digits, null for NaN and infinities.
struct JsonNumber {
  double value;
};

// The last "time" in an existing metrics.jsonl (0 when none): a resumed run
// continues the time axis instead of restarting it. Also reports whether
// the file ends inside a line (a killed writer).
struct ExistingMetrics {
  double last_time = 0.0;
  bool ends_mid_line = false;
};

ExistingMetrics read_existing(const std::string& path) {
  ExistingMetrics out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  // Only the end matters: the last lines of a long run's file.
  constexpr long kTail = 1 << 16;
  std::fseek(f, 0, SEEK_END);
  const long size = std::ftell(f);
  std::fseek(f, std::max(0L, size - kTail), SEEK_SET);
  std::string tail(static_cast<size_t>(std::min(size, kTail)), '\0');
  tail.resize(std::fread(tail.data(), 1, tail.size(), f));
  std::fclose(f);
  out.ends_mid_line = !tail.empty() && tail.back() != '\n';
  size_t end = tail.size();
  while (end > 0) {
    const size_t start = tail.rfind('\n', end - 1);
    const size_t begin = start == std::string::npos ? 0 : start + 1;
    try {
      const nlohmann::json j = nlohmann::json::parse(tail.substr(begin, end - begin));
      if (j.contains("time") && j.at("time").is_number()) {
        out.last_time = j.at("time").get<double>();
        break;
      }
    } catch (const nlohmann::json::exception&) {
      // A cut, partial (the tail's first) or foreign line: look further back.
    }
    if (start == std::string::npos) break;
    end = start;
  }
  return out;
}

// Each replica's device memory and measured matmul peak (describe_training_run).
void describe_devices(const distribute::Strategy& strategy, DType compute_dtype, RunInfo& info) {
  const Device device = strategy.device(0);
  info.device_memory_bytes = cpu_info().memory_bytes / strategy.local_replicas();
  if (device.kind == DeviceKind::cuda) {
    // Virtual GPU devices share their GPU's memory.
    const std::vector<kernels::BackendInfo::Gpu> gpus = kernels::backend_info().gpus;
    const int per_gpu = std::max(1, cuda_device_count() / std::max(1, cuda_gpu_count()));
    const auto gpu = static_cast<size_t>(device.index / per_gpu);
    info.device_memory_bytes = gpu < gpus.size() ? gpus[gpu].memory_bytes / per_gpu : 0;
  }
  NumThreadsScope threads(strategy.threads_per_replica());
  // 1024 keeps the CPU's measurement short; a GPU needs 4096 to come near
  // its peak (an 8192 product reaches it).
  info.peak_flops_per_device =
      kernels::measure_matmul_peak(compute_dtype == DType::bf16 ? DType::bf16 : DType::f32,
                                   device.kind == DeviceKind::cuda ? 4096 : 1024, 0.2, device);
  // The measurement's buffers are gone; peaks should be the model's.
  for (const Device& d : info.devices) allocator_for(d).reset_peaks();
}

}  // namespace
}  // namespace tandem::monitor

template <>
struct fmt::formatter<tandem::monitor::JsonNumber> : fmt::formatter<double> {
  template <typename Context>
  auto format(tandem::monitor::JsonNumber n, Context& ctx) const {
    if (!std::isfinite(n.value)) return fmt::format_to(ctx.out(), "null");
    return fmt::formatter<double>::format(n.value, ctx);
  }
};

namespace tandem::monitor {

int64_t peak_resident_set_bytes() {
  // VmHWM: the high-water mark of the resident set, in kB.
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return 0;
  char line[256];
  long long kilobytes = 0;
  while (std::fgets(line, sizeof(line), status)) {
    if (std::sscanf(line, "VmHWM: %lld kB", &kilobytes) == 1) break;
  }
  std::fclose(status);
  return kilobytes * 1024;
}

int64_t resident_set_bytes() {
  // Kept open: re-reading /proc/self/statm with pread is a few microseconds.
  static const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[128];
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return 0;
  text[n] = '\0';
  long long pages_total = 0, pages_resident = 0;
  if (std::sscanf(text, "%lld %lld", &pages_total, &pages_resident) != 2) return 0;
  return pages_resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

RunInfo describe_run(train::Trainer& trainer, int64_t steps_per_epoch) {
  distribute::Strategy& strategy = trainer.strategy();
  const train::TrainConfig& config = trainer.config();
  RunInfo info{.model = trainer.model_spec().name,
               .strategy = strategy.name(),
               .precision = std::string(precision::policy_name(trainer.model_spec().policy)),
               .global_replicas = strategy.global_replicas(),
               .threads_per_replica = strategy.threads_per_replica(),
               .first_replica = strategy.global_replica(0),
               .batch_size = config.batch_size,
               .epochs = config.epochs,
               .steps_per_epoch = steps_per_epoch,
               .parameters = trainer.model().parameter_count()};
  if (comm::Communicator* c = strategy.communicator(0)) info.backend = c->backend();
  for (int r = 0; r < strategy.local_replicas(); ++r) info.devices.push_back(strategy.device(r));
  return info;
}

RunInfo describe_training_run(train::Trainer& trainer, int64_t steps_per_epoch,
                              const std::optional<data::Element>& example) {
  RunInfo info = describe_run(trainer, steps_per_epoch);
  info.layers = example_layer_flops(trainer.model(), example, trainer.config().input_feature);
  describe_devices(trainer.strategy(), trainer.model_spec().compute_dtype, info);
  return info;
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
    const std::string path = train::RunDirectory(options_.run_dir).metrics();
    ExistingMetrics existing;
    if (options_.append) {
      existing = read_existing(path);
      read_earlier_steps();
    }
    time_offset_ = existing.last_time;
    metrics_ = std::fopen(path.c_str(), options_.append ? "a" : "w");
    if (metrics_ == nullptr) TANDEM_THROW(IoError, "cannot write '", path, "'");
    // End a line the killed run cut short, so that it stays one bad line.
    if (existing.ends_mid_line) write_line("");
    nlohmann::json devices = nlohmann::json::array();
    for (const Device& d : info_.devices) devices.push_back(d.to_string());
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerFlops& l : info_.layers) {
      layers.push_back({{"layer", l.layer},
                        {"description", l.description},
                        {"forward_flops_per_example", l.forward_flops}});
    }
    write_line(nlohmann::json{
        {"type", "run"},
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
        {"device_memory_bytes", info_.device_memory_bytes},
        {"layers",
         layers}}.dump());
  }
  if (!options_.tensorboard_dir.empty()) {
    remove_earlier_events();
    events_ = std::make_unique<interop::EventWriter>(options_.tensorboard_dir);
  }
  // A fresh run traces from its first step; a resumed one starts in on_step.
  if (options_.trace_first == 1 && !options_.append) start_trace();
}

// A fresh run in a directory an earlier run left (one that failed before
// its first checkpoint, which a new run may overwrite) replaces its
// metrics.jsonl; the event files in the run's own tensorboard folder go
// too, or TensorBoard showed both runs as one. A folder given elsewhere may
// be shared by runs (a log directory), and is left alone.
void Monitor::remove_earlier_events() const {
  if (options_.append || options_.run_dir.empty()) return;
  namespace fs = std::filesystem;
  const fs::path own = fs::path(options_.run_dir) / "tensorboard";
  std::error_code error;
  if (fs::weakly_canonical(options_.tensorboard_dir, error) != fs::weakly_canonical(own, error))
    return;
  for (const auto& entry : fs::directory_iterator(own, error)) {
    if (entry.path().filename().string().starts_with("events.out.tfevents."))
      fs::remove(entry.path(), error);
  }
}

Monitor::~Monitor() {
  finish();
  if (metrics_ != nullptr) std::fclose(metrics_);
}

void Monitor::write_line(const std::string& line) {
  std::string buffer = line;
  buffer += '\n';
  write_record(buffer);
}

void Monitor::write_record(std::string_view line) {
  if (metrics_ == nullptr) return;
  // One write per line, flushed: a killed run leaves whole lines. A failed
  // one stops the file (a later line after a partial one would make it
  // corrupt in the middle, which tandem report refuses).
  const bool written = std::fwrite(line.data(), 1, line.size(), metrics_) == line.size() &&
                       std::fflush(metrics_) == 0;
  if (!written) {
    // A full disk stops the record, not the run (its checkpoints may still
    // fit), and says so once where the run's warnings are read.
    warnings_.push_back(std::string("metrics.jsonl stopped: a write failed (") +
                        std::strerror(errno) + "); the records after it are lost");
    std::fclose(metrics_);
    metrics_ = nullptr;
  }
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

StepRecord Monitor::step_record(const train::StepInfo& s, Clock::time_point now) {
  const int64_t flops_now = kernels::flops_executed();
  StepRecord record{.epoch = s.epoch,
                    .step = s.step,
                    .global_step = s.global_step,
                    .time = time_offset_ + seconds_between(start_, now),
                    .loss = s.loss,
                    .learning_rate = s.learning_rate,
                    .batch_examples = s.batch_examples,
                    .step_seconds = s.step_seconds,
                    .input_seconds = s.input_seconds,
                    .flops = static_cast<double>(flops_now - flops_at_last_step_),
                    .loss_scale = s.loss_scale,
                    .gradient_norm = s.gradient_norm,
                    .noise_scale = s.noise_scale,
                    .skipped = s.skipped};
  flops_at_last_step_ = flops_now;
  for (const train::ReplicaStepTime& t : s.replicas) {
    record.replicas.push_back(
        {.replica = t.replica,
         .forward = t.forward,
         .backward = t.backward,
         .communication = t.communication,
         .optimizer = t.optimizer,
         .idle = t.idle,
         .examples = t.examples >= 0 ? static_cast<double>(t.examples) : std::nan("")});
  }
  for (const auto& b : s.buckets) {
    record.allreduce_bytes += b.wire_bytes;
    record.allreduce_seconds += b.seconds;
  }
  record.examples_per_second =
      s.step_seconds > 0.0 ? static_cast<double>(s.batch_examples) / s.step_seconds : 0.0;
  record.flops_per_second = s.step_seconds > 0.0 ? record.flops / s.step_seconds : 0.0;
  record.peak_fraction = info_.peak_flops_per_device > 0.0 && !info_.devices.empty()
                             ? record.flops_per_second / (info_.peak_flops_per_device *
                                                          static_cast<double>(info_.devices.size()))
                             : NAN;
  // RSS at most once a second: reading it takes the kernel's mm lock, which
  // the replicas' page faults contend for (~20 us a read inside a run).
  if (now - rss_read_at_ > std::chrono::seconds(1)) {
    rss_bytes_ = resident_set_bytes();
    rss_read_at_ = now;
  }
  record.rss_bytes = rss_bytes_;
  return record;
}

void Monitor::slide_window(const StepRecord& record, const train::StepInfo& s,
                           Clock::time_point now) {
  WindowStep w{.end = now,
               .seconds = s.step_seconds,
               .input = s.input_seconds,
               .examples = s.batch_examples};
  for (const ReplicaTimes& r : record.replicas) w.busy.push_back(r.compute());
  window_.push_back(std::move(w));
  while (window_.size() > 1 && seconds_between(window_.front().end, now) > options_.window_seconds)
    window_.pop_front();
}

void Monitor::write_scalars(const StepRecord& record, const std::vector<DeviceMemory>& memory) {
  std::vector<std::pair<std::string, double>> scalars = {
      {"train/loss", record.loss},
      {"train/learning_rate", record.learning_rate},
      {"train/examples_per_second", record.examples_per_second},
      {"train/step_seconds", record.step_seconds},
      {"train/input_seconds", record.input_seconds},
      {"train/loss_scale", record.loss_scale},
      {"train/gradient_norm", record.gradient_norm},
      {"train/noise_scale", record.noise_scale},
      {"train/peak_fraction", record.peak_fraction}};
  for (size_t i = 0; i < record.replicas.size(); ++i) {
    const std::string replica = fmt::format("replica_{}/", record.replicas[i].replica);
    scalars.emplace_back(replica + "busy_fraction",
                         i < record.busy_fractions.size() ? record.busy_fractions[i] : NAN);
    scalars.emplace_back(replica + "exposed_communication_seconds",
                         record.replicas[i].communication);
    scalars.emplace_back(replica + "idle_seconds", record.replicas[i].idle);
  }
  for (const DeviceMemory& m : memory)
    scalars.emplace_back("memory/" + m.device + "/peak_bytes", static_cast<double>(m.peak_total));
  write_events(record.global_step, scalars);
}

void Monitor::follow_trace_window(int64_t global_step) {
  if (tracing_ && global_step >= options_.trace_last) finish_trace();
  if (!tracing_ && !trace_written_ && options_.trace_first > 0 &&
      global_step + 1 >= options_.trace_first && global_step < options_.trace_last)
    start_trace();
}

void Monitor::on_step(const train::StepInfo& s) {
  const Clock::time_point now = Clock::now();
  struct OwnTime {
    double& total;
    Clock::time_point start;
    ~OwnTime() { total += seconds_between(start, Clock::now()); }
  } own{own_seconds_, now};
  StepRecord record = step_record(s, now);
  add_earlier_steps(record.global_step);
  stats_.add(record);
  slide_window(record, s, now);
  const std::vector<DeviceMemory> memory = memory_snapshot();
  merge_memory_peaks(training_memory_, memory);
  record.busy_fractions = busy_fractions();
  last_global_step_ = record.global_step;
  if (record.global_step % options_.metrics_every == 0 || s.step == s.steps_per_epoch) {
    if (metrics_ != nullptr) write_step_line(record, s, memory);
    if (events_) write_scalars(record, memory);
  }
  follow_trace_window(record.global_step);
}

// The step line is formatted directly (not through a JSON object): it is
// written every step on the path the replicas wait on. Field names match
// detail/metrics_json.h, which reads them back.
void Monitor::write_step_line(const StepRecord& r, const train::StepInfo& s,
                              const std::vector<DeviceMemory>& memory) {
  fmt::memory_buffer out;
  auto it = std::back_inserter(out);
  using N = JsonNumber;
  const auto write_value = [&](FieldKind kind, double v) {
    if (kind == FieldKind::integer)
      fmt::format_to(it, "{}", static_cast<int64_t>(v));
    else if (kind == FieldKind::boolean)
      fmt::format_to(it, "{}", v != 0.0);
    else
      fmt::format_to(it, "{}", N{v});
  };
  fmt::format_to(it, "{{\"type\":\"step\"");
  for (const StepField& f : step_fields()) {
    fmt::format_to(it, ",\"{}\":", f.name);
    write_value(f.kind, f.get(r));
  }
  fmt::format_to(it, ",\"replicas\":[");
  for (size_t i = 0; i < r.replicas.size(); ++i) {
    fmt::format_to(it, "{}{{", i ? "," : "");
    bool first = true;
    for (const ReplicaField& f : replica_fields()) {
      fmt::format_to(it, "{}\"{}\":", first ? "" : ",", f.name);
      write_value(f.kind, f.get(r, i));
      first = false;
    }
    fmt::format_to(it, "}}");
  }
  fmt::format_to(it, "]");
  if (!s.buckets.empty()) {
    fmt::format_to(it, ",\"allreduce\":{{\"backend\":{},\"buckets\":[",
                   nlohmann::json(info_.backend).dump());
    for (size_t i = 0; i < s.buckets.size(); ++i) {
      const auto& b = s.buckets[i];
      fmt::format_to(it,
                     "{}{{\"bytes\":{},\"seconds\":{},\"bus_bandwidth\":{},\"algorithm\":\"{}\"}}",
                     i ? "," : "", b.wire_bytes, N{b.seconds},
                     N{allreduce_bus_bandwidth(static_cast<double>(b.wire_bytes), b.seconds,
                                               info_.global_replicas)},
                     b.algorithm);
    }
    fmt::format_to(it, "]}}");
  }
  fmt::format_to(it, ",\"memory\":[");
  for (size_t d = 0; d < memory.size(); ++d) {
    const DeviceMemory& m = memory[d];
    fmt::format_to(it, "{}{{\"device\":{}", d ? "," : "", nlohmann::json(m.device).dump());
    for (const auto* field : {"bytes_in_use", "peak_bytes"}) {
      const auto& values = field[0] == 'b' ? m.in_use : m.peak;
      fmt::format_to(it, ",\"{}\":{{", field);
      for (int c = 0; c < kMemoryCategoryCount; ++c) {
        fmt::format_to(it, "{}\"{}\":{}", c ? "," : "",
                       memory_category_name(static_cast<MemoryCategory>(c)), values[c]);
      }
      fmt::format_to(it, "}}");
    }
    fmt::format_to(it, ",\"peak_total_bytes\":{},\"capacity_bytes\":{}}}", m.peak_total,
                   m.capacity);
  }
  fmt::format_to(it, "]}}\n");
  write_record({out.data(), out.size()});
}

void Monitor::on_membership_change(const train::MembershipChange& c) {
  nlohmann::json line = {{"type", "membership"},
                         {"time", time_offset_ + seconds_between(start_, Clock::now())},
                         {"generation", c.generation},
                         {"members", c.members},
                         {"lost", c.lost},
                         {"joined", c.joined},
                         {"reason", c.reason},
                         {"global_step", c.global_step},
                         {"rolled_back_steps", c.rolled_back_steps},
                         {"seconds", c.seconds},
                         {"process_batch", c.process_batch}};
  write_line(line.dump());
  stats_.add_membership_change(static_cast<int>(c.lost.size()), static_cast<int>(c.joined.size()),
                               c.rolled_back_steps, c.seconds);
}

void Monitor::on_epoch(const train::EpochResult& e) {
  const auto start = Clock::now();
  flops_at_last_step_ = kernels::flops_executed();  // evaluation's work is not a step's
  nlohmann::json line = e;
  line["type"] = "epoch";
  line["time"] = time_offset_ + seconds_between(start_, Clock::now());
  // The epoch line's peaks include the evaluation; then the peaks restart so
  // that the steps' figures (and the findings) are training's own.
  nlohmann::json memory = nlohmann::json::array();
  for (const DeviceMemory& m : memory_snapshot()) memory.push_back(detail::to_json(m));
  line["memory"] = std::move(memory);
  for (const Device& d : info_.devices) allocator_for(d).reset_peaks();
  stats_.set_memory(training_memory_);
  line["rss_bytes"] = resident_set_bytes();
  if (!e.input_stages.empty()) {
    nlohmann::json stages = nlohmann::json::array();
    for (const data::StageStats& stage : e.input_stages) stages.push_back(detail::to_json(stage));
    line["input_pipeline"] = std::move(stages);
    input_stages_ = e.input_stages;
  }
  write_line(line.dump());
  if (events_) {
    std::vector<std::pair<std::string, double>> scalars = {
        {"epoch/train_loss", e.train_loss},
        {"epoch/validation_loss", e.validation_loss},
        {"epoch/examples_per_second", e.examples_per_second}};
    for (const auto& [name, value] : e.train_metrics)
      scalars.emplace_back("epoch/train_" + name, value);
    for (const auto& [name, value] : e.validation_metrics)
      scalars.emplace_back("epoch/validation_" + name, value);
    if (!e.staleness.empty()) scalars.emplace_back("epoch/mean_staleness", e.mean_staleness());
    write_events(last_global_step_, scalars);
  }
  own_seconds_ += seconds_between(start, Clock::now());
}

// A failed write to the event file (a full disk) stops the event file, not
// the run: metrics.jsonl is the record.
void Monitor::write_events(int64_t step,
                           const std::vector<std::pair<std::string, double>>& scalars) {
  try {
    events_->scalars(step, scalars);
  } catch (const IoError& e) {
    warnings_.push_back(std::string("TensorBoard events stopped: ") + e.what());
    events_.reset();
  }
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
  try {
    trace::write_chrome_trace(train::RunDirectory(options_.run_dir).trace(), threads,
                              trace_origin_);
  } catch (const IoError& e) {
    // A trace is a diagnostic: losing it must not stop the training.
    warnings_.push_back(std::string("no trace written: ") + e.what());
  }
}

void Monitor::finish() {
  if (tracing_) finish_trace();
  add_earlier_steps(std::numeric_limits<int64_t>::max());  // when no step ran here
  // No step ran here (stopped at once, or resumed at the end): no training
  // peaks, so no memory findings rather than start-up's figures.
  stats_.set_memory(training_memory_);
}

void Monitor::read_earlier_steps() {
  try {
    detail::RunFiles files = detail::read_run(options_.run_dir);
    for (auto& [global_step, line] : files.steps) earlier_steps_.push_back(std::move(line.record));
    earlier_memory_ = std::move(files.training_memory);
  } catch (const Error&) {
    // No earlier step to add (none logged, or no file): this run's alone.
  }
}

void Monitor::add_earlier_steps(int64_t first_global_step) {
  if (earlier_steps_.empty()) return;
  // Steps the earlier process ran past its last checkpoint run again here:
  // this run's figures replace theirs.
  for (const StepRecord& r : earlier_steps_)
    if (r.global_step < first_global_step) stats_.add(r);
  merge_memory_peaks(training_memory_, earlier_memory_);
  earlier_steps_ = {};
  earlier_memory_ = {};
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

double Monitor::recent_input_fraction() const {
  double seconds = 0.0, input = 0.0;
  for (const WindowStep& w : window_) seconds += w.seconds, input += w.input;
  return seconds > 0.0 ? input / seconds : 0.0;
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
  nlohmann::json input_pipeline = nlohmann::json::array();
  for (const data::StageStats& stage : input_stages_)
    input_pipeline.push_back(detail::to_json(stage));
  nlohmann::json findings = nlohmann::json::array();
  for (const Finding& f : stats_.diagnose())
    findings.push_back({{"kind", f.kind}, {"message", f.message}, {"value", f.value}});
  const double flops = stats_.flops_per_second();
  // FLOPs are this process's, examples the whole job's.
  const double devices_in_job =
      info_.devices.empty()
          ? 1.0
          : static_cast<double>(info_.global_replicas) / static_cast<double>(info_.devices.size());
  double forward_per_example = 0.0;
  for (const LayerFlops& l : info_.layers) forward_per_example += l.forward_flops;
  const double devices = static_cast<double>(std::max<size_t>(1, info_.devices.size()));
  nlohmann::json j = {
      {"measured_steps", stats_.measured_steps()},
      {"mean_step_seconds", stats_.mean_step_seconds()},
      {"step_seconds_p50", stats_.step_seconds_quantile(0.5)},
      {"step_seconds_p90", stats_.step_seconds_quantile(0.9)},
      {"step_seconds_max", stats_.step_seconds_quantile(1.0)},
      {"steps_per_second",
       stats_.mean_step_seconds() > 0.0 ? 1.0 / stats_.mean_step_seconds() : 0.0},
      {"examples_per_second", stats_.examples_per_second()},
      {"noise_scale", tandem::detail::number_or_null(stats_.noise_scale())},
      {"input_fraction", stats_.input_fraction()},
      {"communication_fraction", stats_.communication_fraction()},
      {"idle_fraction", stats_.idle_fraction()},
      {"replicas", replicas},
      {"flops_per_second", flops},
      {"flops_per_example", stats_.examples_per_second() > 0.0
                                ? flops / stats_.examples_per_second() * devices_in_job
                                : 0.0},
      {"forward_flops_per_example", forward_per_example},
      {"peak_flops_per_device", info_.peak_flops_per_device},
      {"peak_fraction",
       info_.peak_flops_per_device > 0.0 ? flops / (info_.peak_flops_per_device * devices) : 0.0},
      {"allreduce_backend", info_.backend},
      {"allreduce_bus_bandwidth",
       allreduce_bus_bandwidth(stats_.allreduce_bytes_per_second(), 1.0, info_.global_replicas)},
      {"memory", memory},
      {"input_pipeline", input_pipeline},
      {"rss_bytes", resident_set_bytes()},
      {"peak_rss_bytes", peak_resident_set_bytes()},
      {"monitor_seconds", own_seconds_},
      {"warnings", warnings_},
      {"findings", findings}};
  return j.dump();
}

}  // namespace tandem::monitor
