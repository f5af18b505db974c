#pragma once
// What a run's steps add up to, and what that says about the run. The live
// Monitor and `tandem report` (reading metrics.jsonl back) aggregate the same
// StepRecords the same way, so summary.json and report.html agree.

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/tensor/allocator.h"

namespace tandem::monitor {

// One replica's share of a step (seconds); with the step's input time the
// parts add up to the step time.
struct ReplicaTimes {
  int replica = 0;  // global replica index
  double forward = 0.0;
  double backward = 0.0;
  double communication = 0.0;  // all-reduce not hidden behind backward
  double optimizer = 0.0;
  double idle = 0.0;  // waiting for other replicas or the step's end
  // Examples it computed (the parameter server's workers, which go at their
  // own pace); NaN where every replica computes its share of every step.
  double examples = NAN;
  double compute() const { return forward + backward + optimizer; }
};

// A device's memory in bytes, by MemoryCategory.
struct DeviceMemory {
  std::string device;  // "cpu:0"
  std::array<int64_t, kMemoryCategoryCount> in_use{};
  std::array<int64_t, kMemoryCategoryCount> peak{};
  int64_t peak_total = 0;
  int64_t capacity = 0;  // what the device can hold (its share of RAM on a CPU); 0: unknown
};

// One training step as metrics.jsonl records it. The fields' names and
// meanings in the file are in one table, monitor/step_schema.h.
struct StepRecord {
  int64_t epoch = 0;  // 1-based
  int64_t step = 0;   // within the epoch, 1-based
  int64_t global_step = 0;
  double time = 0.0;  // seconds since the run started, at the step's end
  double loss = 0.0;
  double learning_rate = 0.0;
  int64_t batch_examples = 0;  // the global batch's examples (all processes)
  double step_seconds = 0.0;
  double input_seconds = 0.0;
  double examples_per_second = 0.0;
  std::vector<ReplicaTimes> replicas;  // this process's replicas
  std::vector<double> busy_fractions;  // per replica, over the monitor's window
  double flops = 0.0;                  // counted by the matrix kernels, this process's replicas
  double flops_per_second = 0.0;
  double peak_fraction = 0.0;      // of the devices' measured peak; NaN: unknown
  int64_t allreduce_bytes = 0;     // wire bytes of local replica 0's buckets
  double allreduce_seconds = 0.0;  // their collectives' durations, summed
  double loss_scale = 1.0;
  double gradient_norm = NAN;  // before clipping; NaN: not computed (no clipping)
  double noise_scale = NAN;    // smoothed gradient noise scale (examples); NaN: not measured
  bool skipped = false;
  int64_t rss_bytes = 0;  // the process's resident set (read at most once a second)
};

struct Finding {
  std::string kind;     // input_bound, communication_bound, straggler, memory_headroom,
                        // memory_pressure, compute_bound
  std::string message;  // one plain sentence with the numbers behind it
  double value = 0.0;   // the figure the finding rests on (a fraction or a factor)
};

// Folds a memory snapshot into `peaks`: each category's and the total's
// largest so far, the latest in-use figures (a snapshot of other devices
// replaces them).
void merge_memory_peaks(std::vector<DeviceMemory>& peaks,
                        const std::vector<DeviceMemory>& snapshot);

class RunStats {
 public:
  // The first `warmup_steps` steps (primitive creation, allocator warm-up)
  // are counted but left out of the means.
  static constexpr int64_t kDefaultWarmupSteps = 2;
  explicit RunStats(int64_t warmup_steps = kDefaultWarmupSteps) : warmup_steps_(warmup_steps) {}

  void add(const StepRecord& step);
  void set_memory(std::vector<DeviceMemory> memory) { memory_ = std::move(memory); }
  // An elastic job's change of membership (a metrics.jsonl membership line).
  void add_membership_change(int lost, int joined, int64_t rolled_back_steps, double seconds);

  int64_t steps() const { return steps_; }
  int64_t measured_steps() const { return measured_; }
  double mean_step_seconds() const;
  // The q-quantile (0..1, nearest rank) of the measured steps' times: the
  // spread shows jitter that a mean hides.
  double step_seconds_quantile(double q) const;
  double input_fraction() const;          // of the step time
  double communication_fraction() const;  // mean over replicas, of the step time
  double idle_fraction() const;           // mean over replicas, of the step time
  double examples_per_second() const;
  double flops_per_second() const;  // this process
  double allreduce_bytes_per_second()
      const;  // wire bytes over collective time (algorithm bandwidth)
  // Per replica (in the order first seen): mean seconds of each part.
  const std::vector<ReplicaTimes>& replica_means() const { return replica_means_; }
  const std::vector<DeviceMemory>& memory() const { return memory_; }
  // The latest gradient noise scale the steps reported (NaN: none), and the
  // global batch of that step.
  double noise_scale() const { return noise_scale_; }

  // Plain-language diagnosis of the measured steps and the latest memory:
  // bottlenecks first, or compute_bound when there is none.
  std::vector<Finding> diagnose() const;

 private:
  // diagnose()'s rules (run_stats.cc).
  void find_input_bound(std::vector<Finding>& out) const;
  void find_communication_bound(std::vector<Finding>& out) const;
  void find_straggler(std::vector<Finding>& out) const;
  void find_memory(std::vector<Finding>& out) const;
  void find_batch_against_noise_scale(std::vector<Finding>& out) const;
  void find_membership_changes(std::vector<Finding>& out) const;

  int64_t warmup_steps_;
  int membership_changes_ = 0, members_lost_ = 0, members_joined_ = 0;
  int64_t steps_taken_again_ = 0;
  double membership_seconds_ = 0.0;
  int64_t steps_ = 0, measured_ = 0;
  double step_seconds_ = 0.0, input_seconds_ = 0.0, examples_ = 0.0, flops_ = 0.0;
  double allreduce_bytes_ = 0.0, allreduce_seconds_ = 0.0;
  std::vector<double> step_times_;
  std::vector<ReplicaTimes> replica_sums_;
  std::vector<ReplicaTimes> replica_means_;
  // Per replica (replica_sums_' order): steps in which its compute was above
  // the median of the others'.
  std::vector<int64_t> slow_steps_;
  std::vector<int64_t> replica_steps_;  // the measured steps each replica took part in
  std::vector<DeviceMemory> memory_;
  double noise_scale_ = NAN, noise_scale_batch_ = 0.0;
};

// Bus bandwidth (nccl-tests convention) of an all-reduce of `bytes` over n ranks.
double allreduce_bus_bandwidth(double bytes, double seconds, int ranks);

}  // namespace tandem::monitor
