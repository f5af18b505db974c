#pragma once
// Monitor: turns the Trainer's per-step timings into what a user reads while
// and after training: metrics.jsonl (a line per step and per epoch, flushed
// as written, so a killed run leaves every finished step), per-device busy
// fractions over a sliding window, memory by category from the allocators,
// achieved FLOP/s against the device's measured matmul peak, all-reduce
// bandwidth, a Chrome trace of a window of steps, and the findings that go
// into summary.json. It is a train::TrainCallbacks consumer; everything it
// does per step is a few clock reads, allocator snapshots and one line of
// JSON. After each epoch line it resets the devices' allocator peaks, so that
// step figures and findings describe training, not evaluation batches.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/data/element.h"
#include "tandem/monitor/model_flops.h"
#include "tandem/monitor/run_stats.h"
#include "tandem/tensor/device.h"
#include "tandem/train/trainer.h"

namespace tandem::interop {
class EventWriter;
}

namespace tandem::monitor {

// What the run is; recorded in metrics.jsonl's first line.
struct RunInfo {
  std::string model;
  std::string strategy;
  std::string precision;
  std::string backend;  // the all-reduce's communicator ("inprocess", "mpi", ...); empty: none
  int global_replicas = 1;
  int threads_per_replica = 1;
  std::vector<Device> devices;  // this process's replica devices, in local order
  int first_replica = 0;        // global index of this process's local replica 0
  int64_t batch_size = 0;       // global
  int64_t epochs = 0;
  int64_t steps_per_epoch = 0;
  int64_t parameters = 0;
  double peak_flops_per_device = 0.0;  // measured matmul peak; 0: unknown
  int64_t device_memory_bytes = 0;     // capacity of each device; 0: unknown
  std::vector<LayerFlops> layers;      // the model's forward FLOPs per example, by layer
};

// The RunInfo fields a trainer determines (model, strategy, precision,
// backend, replicas, devices, sizes; steps_per_epoch from
// Trainer::steps_per_epoch, 0 when unknown); the caller adds the device
// peak, memory capacity and layer FLOPs when it measures them.
RunInfo describe_run(train::Trainer& trainer, int64_t steps_per_epoch);
// describe_run and what a training run's monitor also compares with: the
// model's forward FLOPs by layer for one example of the data (none without
// one), and each replica's device memory and a short matmul run's rate in
// the model's matrix dtype on that device (a GPU's, not the host's: the first
// H200 run reported the host CPU's). Takes about 0.2 s. What `tandem train`
// and the Python package's fit give their monitors.
RunInfo describe_training_run(train::Trainer& trainer, int64_t steps_per_epoch,
                              const std::optional<data::Element>& example);

struct MonitorOptions {
  std::string run_dir;        // metrics.jsonl and trace.json go here; empty: no files
  bool append = false;        // resuming: keep metrics.jsonl's earlier lines
  int64_t metrics_every = 1;  // a step line every N steps (epoch lines always)
  int64_t trace_first = 0;    // global steps [first, last] into trace.json; 0: no trace
  int64_t trace_last = 0;
  double window_seconds = 10.0;  // the busy-fraction window
  // TensorBoard event files (interop/tensorboard.h) go here; empty: none.
  std::string tensorboard_dir;
};

class Monitor {
 public:
  // Throws IoError when metrics.jsonl cannot be opened, InvalidArgument for
  // a bad trace window or metrics interval.
  Monitor(MonitorOptions options, RunInfo info);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  void on_step(const train::StepInfo& step);
  void on_epoch(const train::EpochResult& epoch);
  // An elastic job's membership changed: a "membership" line (the steps
  // after it repeat the rolled-back steps' numbers).
  void on_membership_change(const train::MembershipChange& change);
  // Writes the trace if its window is still open (a run shorter than it).
  void finish();

  // Live figures for the progress view.
  // Each local replica's compute over wall time in the last window_seconds.
  std::vector<double> busy_fractions() const;
  double recent_examples_per_second() const;
  double recent_step_seconds() const;
  // The share of the last window_seconds the steps spent waiting for input.
  double recent_input_fraction() const;
  const RunStats& stats() const { return stats_; }
  // Time spent in on_step and on_epoch so far: the monitor's own cost, which
  // the training threads wait for.
  double own_seconds() const { return own_seconds_; }
  // Problems that did not stop the run (e.g. a trace that could not be written).
  const std::vector<std::string>& warnings() const { return warnings_; }
  // summary.json's "monitor" section, as JSON text.
  std::string summary_json() const;

 private:
  void remove_earlier_events() const;
  struct WindowStep {
    std::chrono::steady_clock::time_point end;
    double seconds = 0.0;
    double input = 0.0;  // seconds waiting for the batch
    int64_t examples = 0;
    std::vector<double> busy;  // per local replica
  };
  std::vector<DeviceMemory> memory_snapshot() const;
  // on_step's parts: the step's record (rates, FLOPs, replicas' times,
  // memory), the sliding window the busy fractions come from, the
  // TensorBoard scalars, and the trace window.
  StepRecord step_record(const train::StepInfo& step, std::chrono::steady_clock::time_point now);
  void slide_window(const StepRecord& record, const train::StepInfo& step,
                    std::chrono::steady_clock::time_point now);
  void write_scalars(const StepRecord& record, const std::vector<DeviceMemory>& memory);
  void follow_trace_window(int64_t global_step);
  void write_line(const std::string& line);  // adds the newline
  void write_record(std::string_view line);  // a whole line, newline included
  void write_step_line(const StepRecord& record, const train::StepInfo& step,
                       const std::vector<DeviceMemory>& memory);
  // A resumed run's summary covers the whole run: the earlier processes'
  // steps (metrics.jsonl's step lines) join the figures before this
  // process's first step (or at finish() when it ran none).
  void read_earlier_steps();
  void add_earlier_steps(int64_t first_global_step);
  void start_trace();
  void finish_trace();
  void write_events(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);

  MonitorOptions options_;
  RunInfo info_;
  std::FILE* metrics_ = nullptr;
  std::unique_ptr<interop::EventWriter> events_;
  int64_t last_global_step_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point trace_origin_;
  bool tracing_ = false;
  bool trace_written_ = false;
  int64_t flops_at_last_step_ = 0;
  std::deque<WindowStep> window_;
  RunStats stats_;
  double own_seconds_ = 0.0;
  double time_offset_ = 0.0;  // a resumed run's time axis continues the earlier one
  std::vector<std::string> warnings_;
  std::vector<DeviceMemory> training_memory_;  // peaks over training steps only
  std::vector<StepRecord> earlier_steps_;      // a resumed run's, until added
  std::vector<DeviceMemory> earlier_memory_;
  std::vector<data::StageStats> input_stages_;  // the last epoch's input pipeline counters
  int64_t rss_bytes_ = 0;
  std::chrono::steady_clock::time_point rss_read_at_;
};

// Resident set size of this process in bytes (0 where /proc is unavailable).
int64_t resident_set_bytes();
// The largest resident set size of this process so far (0 where /proc is
// unavailable).
int64_t peak_resident_set_bytes();

}  // namespace tandem::monitor
