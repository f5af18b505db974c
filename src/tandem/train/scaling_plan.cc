#include "tandem/train/scaling_plan.h"

#include <algorithm>
#include <cmath>

#include "tandem/base/error.h"
#include "tandem/base/statistics.h"
#include "tandem/comm/bucketer.h"

namespace tandem::train {

double LinkModel::small_seconds(int ranks) const {
  return ranks <= 1 ? 0.0 : latency * std::log2(static_cast<double>(ranks));
}

double LinkModel::all_reduce_seconds(double bytes, int ranks) const {
  if (ranks <= 1) return 0.0;
  const double bus_bytes = 2.0 * (ranks - 1) / ranks * bytes;
  return small_seconds(ranks) + bus_bytes / bus_bandwidth;
}

LinkModel fit_link(const std::vector<MeasuredAllReduce>& table, int ranks) {
  if (table.empty())
    TANDEM_THROW(InvalidArgument, "a link model needs at least one measured all-reduce");
  if (ranks < 2) TANDEM_THROW(InvalidArgument, "a link model needs 2 or more ranks, got ", ranks);
  for (const MeasuredAllReduce& m : table) {
    if (!(m.bytes > 0.0) || !(m.seconds > 0.0) || !std::isfinite(m.bytes) ||
        !std::isfinite(m.seconds) || !(m.cpu_seconds >= 0.0) || !std::isfinite(m.cpu_seconds)) {
      TANDEM_THROW(InvalidArgument,
                   "a measured all-reduce needs positive bytes and time and a CPU time >= 0, got ",
                   m.bytes, " bytes in ", m.seconds, " s (CPU ", m.cpu_seconds, " s)");
    }
  }
  std::vector<MeasuredAllReduce> sorted = table;
  std::sort(sorted.begin(), sorted.end(),
            [](const MeasuredAllReduce& a, const MeasuredAllReduce& b) { return a.bytes < b.bytes; });
  const double factor = 2.0 * (ranks - 1) / ranks;
  std::vector<double> bandwidths, cpu;
  for (const MeasuredAllReduce& m : sorted) {
    if (m.bytes < (1 << 20)) continue;
    bandwidths.push_back(factor * m.bytes / m.seconds);
    cpu.push_back(m.cpu_seconds / m.seconds);
  }
  if (bandwidths.empty()) {
    bandwidths.push_back(factor * sorted.back().bytes / sorted.back().seconds);
    cpu.push_back(sorted.back().cpu_seconds / sorted.back().seconds);
  }
  return {.latency = sorted.front().seconds / std::log2(static_cast<double>(ranks)),
          .bus_bandwidth = median(bandwidths),
          .cpu_per_second = median(cpu)};
}

ScalingPrediction predict_scaling(const StepProfile& profile, const ScalingSetup& setup) {
  if (setup.hosts < 1 || setup.devices_per_host < 1) {
    TANDEM_THROW(InvalidArgument,
                 "a scaling plan needs at least one host and one device per host, got ",
                 setup.hosts, " x ", setup.devices_per_host);
  }
  if (profile.examples < 1) TANDEM_THROW(InvalidArgument, "the profile has no examples per step");
  for (double t : {profile.forward, profile.backward, profile.optimizer, profile.other}) {
    if (!(t >= 0.0) || !std::isfinite(t))
      TANDEM_THROW(InvalidArgument, "the profile's times must be finite and >= 0, got ", t);
  }
  if (!(profile.one_device_step() > 0.0))
    TANDEM_THROW(InvalidArgument, "the profile's step takes no time");
  const bool across_hosts = setup.hosts > 1, within_host = setup.devices_per_host > 1;
  if ((across_hosts && !(setup.between_hosts.bus_bandwidth > 0.0)) ||
      (within_host && !(setup.local.bus_bandwidth > 0.0))) {
    TANDEM_THROW(InvalidArgument, "the link model of ",
                 across_hosts ? "the hosts' link" : "the devices of a host",
                 " needs a positive bandwidth");
  }
  if (setup.wire_bytes != 2 && setup.wire_bytes != 4)
    TANDEM_THROW(InvalidArgument, "wire bytes per element must be 2 or 4, got ", setup.wire_bytes);

  ScalingPrediction out;
  // A small collective crosses both levels.
  const double small = setup.between_hosts.small_seconds(setup.hosts) +
                       setup.local.small_seconds(setup.devices_per_host);
  struct Bucket {
    double ready_work = 0.0;  // seconds of backward done when it is complete
    double seconds = 0.0;     // its all-reduce, alone on the host
    double cpu = 0.0;         // CPU seconds per second of it
  };
  std::vector<Bucket> buckets;
  if ((across_hosts || within_host) && !profile.gradients.empty()) {
    std::vector<comm::TensorLayout> layouts;
    for (const StepProfile::Gradient& g : profile.gradients) {
      if (g.elements < 1 || !(g.ready >= 0.0 && g.ready <= 1.0)) {
        TANDEM_THROW(InvalidArgument,
                     "a gradient needs elements and a ready fraction in [0, 1], got ", g.elements,
                     " elements ready at ", g.ready);
      }
      layouts.push_back({Shape{g.elements}, DType::f32});
    }
    const comm::Bucketer bucketer(layouts, {.bucket_bytes = setup.bucket_bytes,
                                            .first_bucket_bytes = setup.first_bucket_bytes,
                                            .allocate = false});
    for (size_t b = 0; b < bucketer.bucket_count(); ++b) {
      double ready = 0.0;
      for (size_t t : bucketer.tensors_in(b)) ready = std::max(ready, profile.gradients[t].ready);
      const auto elements = static_cast<double>(bucketer.bucket_elements(b));
      // The replicas of a host reduce in f32 in memory; the hosts exchange the wire dtype.
      const double local =
          setup.local.all_reduce_seconds(4.0 * elements, setup.devices_per_host);
      const double hosts =
          across_hosts ? setup.between_hosts.all_reduce_seconds(
                             static_cast<double>(setup.wire_bytes) * elements, setup.hosts)
                       : 0.0;
      Bucket bucket{.ready_work = ready * profile.backward, .seconds = small + local + hosts};
      if (!setup.spare_core && bucket.seconds > 0.0) {
        bucket.cpu = (local * setup.local.cpu_per_second +
                      hosts * setup.between_hosts.cpu_per_second) /
                     bucket.seconds;
      }
      buckets.push_back(bucket);
      out.buckets.push_back({.elements = bucketer.bucket_elements(b)});
    }
  }

  // Backward's work and the link's queue of buckets, advanced from event to
  // event (backward completing a bucket or ending, an all-reduce ending);
  // while both run they share the cores, each at 1 / (1 + cpu).
  double now = profile.forward, work = 0.0, left = 0.0, backward_end = -1.0;
  size_t completed = 0, started = 0;  // buckets backward has completed; the link has started
  int active = -1;
  for (;;) {
    for (; completed < buckets.size() && work >= buckets[completed].ready_work; ++completed)
      out.buckets[completed].ready = now;
    if (active < 0 && started < completed) {
      active = static_cast<int>(started++);
      left = buckets[active].seconds;
      out.buckets[active].start = now;
    }
    const bool computing = work < profile.backward;
    if (!computing && backward_end < 0.0) backward_end = now;
    if (!computing && active < 0) break;
    const double rate = computing && active >= 0 ? 1.0 / (1.0 + buckets[active].cpu) : 1.0;
    const double target = completed < buckets.size()
                              ? std::min(profile.backward, buckets[completed].ready_work)
                              : profile.backward;
    const double compute_dt = computing ? (target - work) / rate : INFINITY;
    const double comm_dt = active >= 0 ? left / rate : INFINITY;
    const double dt = std::min(compute_dt, comm_dt);
    now += dt;
    work = compute_dt <= comm_dt ? target : work + (computing ? dt * rate : 0.0);
    left = comm_dt <= compute_dt ? 0.0 : left - dt * rate;
    if (active >= 0 && left <= 0.0) {
      out.buckets[active].end = now;
      out.communication_busy += now - out.buckets[active].start;
      active = -1;
    }
  }
  const double link_free = buckets.empty() ? 0.0 : out.buckets.back().end;
  out.compute_slowdown = backward_end - (profile.forward + profile.backward);
  out.exposed_communication = std::max(0.0, link_free - backward_end);
  out.small_collectives = small * setup.small_collectives_per_step;
  out.step = profile.one_device_step() + out.compute_slowdown + out.exposed_communication +
             out.small_collectives;
  const double devices = static_cast<double>(setup.hosts) * setup.devices_per_host;
  out.examples_per_second = devices * static_cast<double>(profile.examples) / out.step;
  out.efficiency = profile.one_device_step() / out.step;
  return out;
}

}  // namespace tandem::train
