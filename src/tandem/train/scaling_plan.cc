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
        !std::isfinite(m.seconds) || !(m.busy_seconds >= 0.0) || !std::isfinite(m.busy_seconds)) {
      TANDEM_THROW(InvalidArgument, "a measured all-reduce needs positive bytes and time, got ",
                   m.bytes, " bytes in ", m.seconds, " s (", m.busy_seconds, " s while busy)");
    }
    // Above 1 only by noise: compute cannot go much faster for an all-reduce.
    if (m.busy_seconds > 0.0 && !(m.busy_compute_rate > 0.0 && m.busy_compute_rate <= 2.0)) {
      TANDEM_THROW(InvalidArgument, "compute's speed during an all-reduce must be in (0, 2], got ",
                   m.busy_compute_rate);
    }
  }
  std::vector<MeasuredAllReduce> sorted = table;
  std::sort(sorted.begin(), sorted.end(),
            [](const MeasuredAllReduce& a, const MeasuredAllReduce& b) { return a.bytes < b.bytes; });
  const double factor = 2.0 * (ranks - 1) / ranks;
  std::vector<const MeasuredAllReduce*> large;
  for (const MeasuredAllReduce& m : sorted)
    if (m.bytes >= (1 << 20)) large.push_back(&m);
  if (large.empty()) large.push_back(&sorted.back());
  // The shared speeds are means, as the bench's: they mix two regimes (the
  // all-reduce shares the core, or waits out compute's time slice).
  std::vector<double> bandwidths;
  double alone = 0.0, busy = 0.0, compute = 0.0;
  int measured = 0;
  for (const MeasuredAllReduce* m : large) {
    bandwidths.push_back(factor * m->bytes / m->seconds);
    if (m->busy_seconds > 0.0) {
      alone += m->seconds;
      busy += m->busy_seconds;
      compute += m->busy_compute_rate;
      ++measured;
    }
  }
  return {.latency = sorted.front().seconds / std::log2(static_cast<double>(ranks)),
          .bus_bandwidth = median(bandwidths),
          .shared_speed = measured == 0 ? 1.0 : std::min(1.0, alone / busy),
          .compute_speed = measured == 0 ? 1.0 : std::min(1.0, compute / measured)};
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
  for (const LinkModel* link : {&setup.local, &setup.between_hosts}) {
    if (!(link->shared_speed > 0.0 && link->shared_speed <= 1.0) ||
        !(link->compute_speed > 0.0 && link->compute_speed <= 1.0)) {
      TANDEM_THROW(InvalidArgument, "a link's shared speeds must be in (0, 1], got ",
                   link->shared_speed, " (all-reduce) and ", link->compute_speed, " (compute)");
    }
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
    // While backward runs: its all-reduce's speed and backward's (fractions).
    double comm_speed = 1.0, compute_speed = 1.0;
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
        // Each level's part at its own shared speeds; the small call check is latency.
        const double local_shared = local / setup.local.shared_speed;
        const double hosts_shared = hosts / setup.between_hosts.shared_speed;
        const double shared = small + local_shared + hosts_shared;
        bucket.comm_speed = bucket.seconds / shared;
        bucket.compute_speed = (small + local_shared * setup.local.compute_speed +
                                hosts_shared * setup.between_hosts.compute_speed) /
                               shared;
      }
      buckets.push_back(bucket);
      out.buckets.push_back({.elements = bucketer.bucket_elements(b)});
    }
  }

  // Backward's work and the link's queue of buckets, advanced from event to
  // event (backward completing a bucket or ending, an all-reduce ending);
  // while both run they go at their shared speeds.
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
    const bool both = computing && active >= 0;
    const double compute_rate = both ? buckets[active].compute_speed : 1.0;
    const double comm_rate = both ? buckets[active].comm_speed : 1.0;
    const double target = completed < buckets.size()
                              ? std::min(profile.backward, buckets[completed].ready_work)
                              : profile.backward;
    const double compute_dt = computing ? (target - work) / compute_rate : INFINITY;
    const double comm_dt = active >= 0 ? left / comm_rate : INFINITY;
    const double dt = std::min(compute_dt, comm_dt);
    now += dt;
    work = compute_dt <= comm_dt ? target : work + (computing ? dt * compute_rate : 0.0);
    left = comm_dt <= compute_dt ? 0.0 : left - dt * comm_rate;
    if (active >= 0 && left <= 0.0) {
      out.buckets[active].end = now;
      out.communication_busy += now - out.buckets[active].start;
      active = -1;
    }
  }
  const double link_free = buckets.empty() ? 0.0 : out.buckets.back().end;
  // Without sharing the events add up to backward's end but for rounding.
  out.compute_slowdown = std::max(0.0, backward_end - (profile.forward + profile.backward));
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
