#include "tandem/monitor/run_stats.h"
#include "tandem/base/statistics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tandem::monitor {
namespace {

// Thresholds of the findings: a part of the step above these is worth a
// user's attention.
constexpr double kInputBound = 0.10;            // of the step waiting for data
constexpr double kCommunicationBound = 0.10;    // of the step in exposed all-reduce
constexpr double kStraggler = 0.15;             // slower than the other replicas' median
constexpr double kStragglerCost = 0.05;         // and costing the others this much of the step
constexpr double kStragglerConsistency = 0.75;  // and above the others in this share of steps
constexpr double kMemoryPressure = 0.90;        // of a device's capacity at the peak
constexpr double kNoiseScaleFactor = 8.0;       // batch this far below or above the noise scale

std::string percent(double fraction) {
  return fmt::format("{:.0f}%", 100.0 * fraction);
}

std::string mib(int64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

double allreduce_bus_bandwidth(double bytes, double seconds, int ranks) {
  if (seconds <= 0.0 || ranks < 2) return 0.0;
  return bytes * 2.0 * (ranks - 1) / ranks / seconds;
}

void RunStats::add(const StepRecord& s) {
  ++steps_;
  if (std::isfinite(s.noise_scale)) {
    noise_scale_ = s.noise_scale;
    // The run's batch, not an epoch's last, partial one.
    noise_scale_batch_ = std::max(noise_scale_batch_, static_cast<double>(s.batch_examples));
  }
  if (steps_ <= warmup_steps_) return;
  ++measured_;
  step_seconds_ += s.step_seconds;
  step_times_.push_back(s.step_seconds);
  input_seconds_ += s.input_seconds;
  examples_ += static_cast<double>(s.batch_examples);
  flops_ += s.flops;
  allreduce_bytes_ += static_cast<double>(s.allreduce_bytes);
  allreduce_seconds_ += s.allreduce_seconds;
  for (const ReplicaTimes& r : s.replicas) {
    auto it = std::find_if(replica_sums_.begin(), replica_sums_.end(),
                           [&](const ReplicaTimes& t) { return t.replica == r.replica; });
    if (it == replica_sums_.end()) {
      replica_sums_.push_back({.replica = r.replica});
      slow_steps_.push_back(0);
      replica_steps_.push_back(0);
      it = replica_sums_.end() - 1;
    }
    ++replica_steps_[static_cast<size_t>(it - replica_sums_.begin())];
    // Slow in this step: above the median of the others' compute (per
    // example, where replicas compute different numbers of examples). (The
    // 15% margin applies to the means; a replica 18% slower with a few
    // percent of jitter per step is above the others in every step, not 15%
    // above.)
    const auto pace = [](const ReplicaTimes& t) {
      return std::isnan(t.examples) ? t.compute()
             : t.examples > 0.0     ? t.compute() / t.examples
                                    : std::nan("");
    };
    std::vector<double> others;
    for (const ReplicaTimes& o : s.replicas)
      if (&o != &r && !std::isnan(pace(o))) others.push_back(pace(o));
    if (!others.empty() && !std::isnan(pace(r)) && pace(r) > median(others))
      ++slow_steps_[static_cast<size_t>(it - replica_sums_.begin())];
    if (!std::isnan(r.examples))
      it->examples = (std::isnan(it->examples) ? 0.0 : it->examples) + r.examples;
    it->forward += r.forward;
    it->backward += r.backward;
    it->communication += r.communication;
    it->optimizer += r.optimizer;
    it->idle += r.idle;
  }
  // Over the steps each replica took part in: an elastic job's replica
  // that joined late or was lost early has fewer.
  replica_means_ = replica_sums_;
  for (size_t i = 0; i < replica_means_.size(); ++i) {
    ReplicaTimes& r = replica_means_[i];
    const double n = static_cast<double>(replica_steps_[i]);
    r.forward /= n, r.backward /= n, r.communication /= n, r.optimizer /= n, r.idle /= n;
    r.examples /= n;
  }
}

double RunStats::mean_step_seconds() const {
  return measured_ ? step_seconds_ / static_cast<double>(measured_) : 0.0;
}

void merge_memory_peaks(std::vector<DeviceMemory>& peaks,
                        const std::vector<DeviceMemory>& snapshot) {
  if (peaks.size() != snapshot.size()) {
    peaks = snapshot;
    return;
  }
  for (size_t d = 0; d < snapshot.size(); ++d) {
    DeviceMemory& t = peaks[d];
    t.in_use = snapshot[d].in_use;
    t.capacity = snapshot[d].capacity;
    for (int c = 0; c < kMemoryCategoryCount; ++c)
      t.peak[c] = std::max(t.peak[c], snapshot[d].peak[c]);
    t.peak_total = std::max(t.peak_total, snapshot[d].peak_total);
  }
}

double RunStats::step_seconds_quantile(double q) const {
  if (step_times_.empty()) return 0.0;
  std::vector<double> sorted = step_times_;
  // Nearest rank: the smallest time with at least q of the steps at or
  // below it (the lower middle of an even count for the median).
  const double n = static_cast<double>(sorted.size());
  const auto rank =
      static_cast<size_t>(std::clamp(std::ceil(std::clamp(q, 0.0, 1.0) * n) - 1.0, 0.0, n - 1.0));
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(rank),
                   sorted.end());
  return sorted[rank];
}

double RunStats::input_fraction() const {
  return step_seconds_ > 0.0 ? input_seconds_ / step_seconds_ : 0.0;
}

double RunStats::communication_fraction() const {
  if (replica_means_.empty() || mean_step_seconds() <= 0.0) return 0.0;
  double sum = 0.0;
  for (const ReplicaTimes& r : replica_means_) sum += r.communication;
  return sum / static_cast<double>(replica_means_.size()) / mean_step_seconds();
}

double RunStats::idle_fraction() const {
  if (replica_means_.empty() || mean_step_seconds() <= 0.0) return 0.0;
  double sum = 0.0;
  for (const ReplicaTimes& r : replica_means_) sum += r.idle;
  return sum / static_cast<double>(replica_means_.size()) / mean_step_seconds();
}

double RunStats::examples_per_second() const {
  return step_seconds_ > 0.0 ? examples_ / step_seconds_ : 0.0;
}

double RunStats::flops_per_second() const {
  return step_seconds_ > 0.0 ? flops_ / step_seconds_ : 0.0;
}

double RunStats::allreduce_bytes_per_second() const {
  return allreduce_seconds_ > 0.0 ? allreduce_bytes_ / allreduce_seconds_ : 0.0;
}

// The finding rules, in the order their findings are listed. Each adds
// what it finds to `out`.
void RunStats::find_input_bound(std::vector<Finding>& out) const {
  const double step_ms = 1e3 * mean_step_seconds();
  const double input = input_fraction();
  if (input >= kInputBound) {
    out.push_back({"input_bound",
                   fmt::format("input-bound: {} of step time waiting for data ({:.1f} of {:.1f} "
                               "ms per step) - raise prefetch (--prefetch, "
                               "TrainConfig::prefetch_batches) or parallel batch building "
                               "(--input-parallel, TrainConfig::input_parallel_calls), or "
                               "cache decoded data",
                               percent(input), input * step_ms, step_ms),
                   input});
  }
}

void RunStats::find_communication_bound(std::vector<Finding>& out) const {
  const double step_ms = 1e3 * mean_step_seconds();
  // Replicas that count their own examples are parameter-server workers:
  // their communication is pulls and pushes, not an all-reduce.
  const bool parameter_server =
      std::any_of(replica_means_.begin(), replica_means_.end(),
                  [](const ReplicaTimes& r) { return !std::isnan(r.examples); });
  const double communication = communication_fraction();
  if (communication >= kCommunicationBound && parameter_server) {
    out.push_back({"communication_bound",
                   fmt::format("communication-bound: {} of step time pulling parameters from "
                               "and pushing gradients to the parameter servers ({:.1f} ms per "
                               "step) - spread the variables over more server ranks (--ps), or "
                               "give each worker a larger share of the batch",
                               percent(communication), communication * step_ms),
                   communication});
  } else if (communication >= kCommunicationBound) {
    out.push_back({"communication_bound",
                   fmt::format("communication-bound: {} of step time in all-reduce not hidden "
                               "behind backward ({:.1f} ms per step) - try a smaller --bucket-mb "
                               "for more overlap, --wire bf16, or a larger batch per replica",
                               percent(communication), communication * step_ms),
                   communication});
  }
}

// A replica whose own compute, measured before it waits for the others, is
// consistently slower than theirs (per example where the replicas compute
// different numbers of them: the parameter server's workers, where a slow
// one computes fewer, not longer).
void RunStats::find_straggler(std::vector<Finding>& out) const {
  if (replica_means_.size() < 2) return;
  bool per_example = true;
  for (const ReplicaTimes& r : replica_means_)
    per_example = per_example && !std::isnan(r.examples) && r.examples > 0.0;
  const auto pace = [&](const ReplicaTimes& r) {
    return per_example ? r.compute() / r.examples : r.compute();
  };
  size_t slowest = 0;
  for (size_t i = 1; i < replica_means_.size(); ++i)
    if (pace(replica_means_[i]) > pace(replica_means_[slowest])) slowest = i;
  std::vector<double> others;
  for (size_t i = 0; i < replica_means_.size(); ++i)
    if (i != slowest) others.push_back(pace(replica_means_[i]));
  const ReplicaTimes& slow = replica_means_[slowest];
  const double typical = median(others);
  const double excess = typical > 0.0 ? pace(slow) / typical - 1.0 : 0.0;
  // What it costs per step: the compute it would not need at the others'
  // pace (synchronous replicas wait that long for it; asynchronous
  // workers lose that many examples' worth of work).
  const double cost =
      per_example ? slow.compute() * excess / (1.0 + excess) : slow.compute() - typical;
  // A replica that is slow now and then (descheduled by the OS, sharing a
  // core) raises its mean without being the one the others wait for.
  const double consistency =
      static_cast<double>(slow_steps_[slowest]) / static_cast<double>(replica_steps_[slowest]);
  if (excess >= kStraggler && cost >= kStragglerCost * mean_step_seconds() &&
      consistency >= kStragglerConsistency) {
    const std::string measure = per_example
                                    ? fmt::format("{:.3f} vs {:.3f} ms of compute per example",
                                                  1e3 * pace(slow), 1e3 * typical)
                                    : fmt::format("{:.1f} vs {:.1f} ms of compute per step",
                                                  1e3 * pace(slow), 1e3 * typical);
    out.push_back(
        {"straggler",
         fmt::format("straggler: replica {} is {} slower than the others ({}, slow in {} of "
                     "the steps); {}",
                     slow.replica, percent(excess), measure, percent(consistency),
                     per_example ? "parameter-server workers wait for it in synchronous "
                                   "rounds, and asynchronous ones train on without its share"
                                 : "the others idle waiting for it"),
         excess});
  }
}

// Each device's peak against its capacity: pressure, or room for a larger batch.
void RunStats::find_memory(std::vector<Finding>& out) const {
  for (const DeviceMemory& m : memory_) {
    if (m.capacity <= 0 || m.peak_total <= 0) continue;
    const int64_t activations = m.peak[static_cast<int>(MemoryCategory::activations)];
    const double used = static_cast<double>(m.peak_total) / static_cast<double>(m.capacity);
    if (used >= kMemoryPressure) {
      out.push_back({"memory_pressure",
                     fmt::format("memory pressure on {}: peak {} is {} of its {} - a smaller batch "
                                 "or mixed_bfloat16 activations would leave room",
                                 m.device, mib(m.peak_total), percent(used), mib(m.capacity)),
                     used});
    } else if (activations > 0) {
      // Activations grow with the batch; everything else does not.
      const double factor = static_cast<double>(m.capacity - (m.peak_total - activations)) /
                            static_cast<double>(activations);
      if (factor >= 2.0) {
        const double shown = std::min(factor, 1024.0);
        out.push_back({"memory_headroom",
                       fmt::format("memory headroom on {}: peak {} of {} ({} activations); the "
                                   "memory allows a {}{:.0f}x larger batch",
                                   m.device, mib(m.peak_total), mib(m.capacity), mib(activations),
                                   factor > shown ? "more than " : "", std::floor(shown)),
                       factor});
      }
    }
  }
}

// The batch against the gradient noise scale (McCandlish et al.): well
// below it, steps are mostly noise; well above it, extra examples buy
// little per step.
void RunStats::find_batch_against_noise_scale(std::vector<Finding>& out) const {
  if (noise_scale_ > 0.0 && noise_scale_batch_ > 0.0) {
    const double ratio = noise_scale_batch_ / noise_scale_;
    if (ratio <= 1.0 / kNoiseScaleFactor) {
      out.push_back({"batch_below_noise_scale",
                     fmt::format("the global batch of {:.0f} is {:.0f}x below the gradient noise "
                                 "scale (about {:.0f} examples): its steps are mostly noise; a "
                                 "batch up to about {:.0f} would need fewer steps for the same "
                                 "progress (scale the learning rate with it: --lr-scaling)",
                                 noise_scale_batch_, 1.0 / ratio, noise_scale_, noise_scale_),
                     ratio});
    } else if (ratio >= kNoiseScaleFactor) {
      out.push_back({"batch_above_noise_scale",
                     fmt::format("the global batch of {:.0f} is {:.0f}x the gradient noise scale "
                                 "(about {:.0f} examples): examples beyond it add little to each "
                                 "step; a smaller batch would reach the same loss with less "
                                 "compute",
                                 noise_scale_batch_, ratio, noise_scale_),
                     ratio});
    }
  }
}

void RunStats::add_membership_change(int lost, int joined, int64_t rolled_back_steps,
                                     double seconds) {
  ++membership_changes_;
  members_lost_ += lost;
  members_joined_ += joined;
  steps_taken_again_ += rolled_back_steps;
  membership_seconds_ += seconds;
}

void RunStats::find_membership_changes(std::vector<Finding>& out) const {
  if (membership_changes_ == 0) return;
  out.push_back({"membership_changes",
                 fmt::format("elastic: the membership changed {} time(s) ({} worker(s) lost, {} "
                             "joined), {:.2f} s to go on and {} step(s) taken again",
                             membership_changes_, members_lost_, members_joined_,
                             membership_seconds_, steps_taken_again_),
                 membership_seconds_});
}

std::vector<Finding> RunStats::diagnose() const {
  std::vector<Finding> out;
  if (measured_ == 0) return out;
  for (const auto rule :
       {&RunStats::find_input_bound, &RunStats::find_communication_bound, &RunStats::find_straggler,
        &RunStats::find_memory, &RunStats::find_batch_against_noise_scale,
        &RunStats::find_membership_changes}) {
    (this->*rule)(out);
  }
  // Without a bottleneck, the replicas compute.
  const double step_ms = 1e3 * mean_step_seconds();
  const double input = input_fraction();
  const double communication = communication_fraction();
  const bool bottleneck = std::any_of(out.begin(), out.end(), [](const Finding& f) {
    return f.kind == "input_bound" || f.kind == "communication_bound" || f.kind == "straggler";
  });
  if (!bottleneck) {
    const double busy = std::max(0.0, 1.0 - input - communication - idle_fraction());
    out.insert(out.begin(),
               {"compute_bound",
                fmt::format("compute-bound: replicas compute {} of each {:.1f} ms step; input "
                            "{}, exposed communication {}, idle {}",
                            percent(busy), step_ms, percent(input), percent(communication),
                            percent(idle_fraction())),
                busy});
  }
  return out;
}

}  // namespace tandem::monitor
