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

double LinkModel::half_ring_seconds(double bytes, int ranks) const {
  if (ranks <= 1) return 0.0;
  return small_seconds(ranks) + (ranks - 1.0) / ranks * bytes / bus_bandwidth;
}

double LinkModel::transfer_seconds(double bytes) const {
  return latency + bytes / bus_bandwidth;
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
  std::sort(
      sorted.begin(), sorted.end(),
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

namespace {

bool takes_wire(UpdateMode mode) {
  return mode == UpdateMode::all_reduce || mode == UpdateMode::zero1;
}

bool parameter_server(UpdateMode mode) {
  return mode == UpdateMode::ps_synchronous || mode == UpdateMode::ps_asynchronous;
}

void check_inputs(const StepProfile& profile, const ScalingSetup& setup) {
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
  for (const StepProfile::Gradient& g : profile.gradients) {
    if (g.elements < 1 || !(g.ready >= 0.0 && g.ready <= 1.0)) {
      TANDEM_THROW(InvalidArgument,
                   "a gradient needs elements and a ready fraction in [0, 1], got ", g.elements,
                   " elements ready at ", g.ready);
    }
  }
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
  if (setup.wire_bytes != 4 && !takes_wire(setup.mode)) {
    TANDEM_THROW(InvalidArgument,
                 "a compressed wire goes with the all-reduce and ZeRO-1 only; ZeRO-2, local SGD "
                 "and the parameter server send f32");
  }
  if (setup.sync_every < 1)
    TANDEM_THROW(InvalidArgument, "local SGD averages every K >= 1 steps, got ", setup.sync_every);
  if (setup.ps_shards < 1)
    TANDEM_THROW(InvalidArgument, "the parameter server needs at least one shard, got ",
                 setup.ps_shards);
}

// One fusion bucket: when backward has completed it, and its collective.
struct Bucket {
  double ready_work = 0.0;  // seconds of backward done when it is complete
  double seconds = 0.0;     // its collective, alone on the host
  // While backward runs: its collective's speed and backward's (fractions).
  double comm_speed = 1.0, compute_speed = 1.0;
};

// The buckets as the Reducer builds them, in backward order, each with the
// collective its mode runs: an all-reduce (the hosts' phase in the wire
// dtype), or under ZeRO-2 a reduce-scatter (across processes: reduced in
// the process, reduce-scattered between them).
std::vector<Bucket> plan_buckets(const StepProfile& profile, const ScalingSetup& setup,
                                 double small, std::vector<BucketSchedule>& schedule) {
  std::vector<comm::TensorLayout> layouts;
  for (const StepProfile::Gradient& g : profile.gradients)
    layouts.push_back({Shape{g.elements}, DType::f32});
  const comm::Bucketer bucketer(layouts, {.bucket_bytes = setup.bucket_bytes,
                                          .first_bucket_bytes = setup.first_bucket_bytes,
                                          .allocate = false});
  const int d = setup.devices_per_host, h = setup.hosts;
  std::vector<Bucket> buckets;
  for (size_t b = 0; b < bucketer.bucket_count(); ++b) {
    double ready = 0.0;
    for (size_t t : bucketer.tensors_in(b)) ready = std::max(ready, profile.gradients[t].ready);
    const double bytes = 4.0 * static_cast<double>(bucketer.bucket_elements(b));
    double local = 0.0, hosts = 0.0;
    if (setup.mode == UpdateMode::zero2) {
      local = h > 1 ? setup.local.all_reduce_seconds(bytes, d)
                    : setup.local.half_ring_seconds(bytes, d);
      hosts = setup.between_hosts.half_ring_seconds(bytes, h);
    } else {
      // The replicas of a host reduce in f32 in memory; the hosts exchange the wire dtype.
      local = setup.local.all_reduce_seconds(bytes, d);
      hosts = setup.between_hosts.all_reduce_seconds(bytes * setup.wire_bytes / 4.0, h);
    }
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
    schedule.push_back({.elements = bucketer.bucket_elements(b)});
  }
  return buckets;
}

struct Overlap {
  double backward_end = 0.0;  // seconds from the step's start
  double link_free = 0.0;     // when the last bucket's collective ends
  double busy = 0.0;          // the collectives' summed time
};

// Backward's work and the link's queue of buckets, advanced from event to
// event (backward completing a bucket or ending, a collective ending); while
// both run they go at their shared speeds.
Overlap overlap_backward(const StepProfile& profile, const std::vector<Bucket>& buckets,
                         std::vector<BucketSchedule>& schedule) {
  Overlap out{.backward_end = -1.0};
  double now = profile.forward, work = 0.0, left = 0.0;
  size_t completed = 0, started = 0;  // buckets backward has completed; the link has started
  int active = -1;
  for (;;) {
    for (; completed < buckets.size() && work >= buckets[completed].ready_work; ++completed)
      schedule[completed].ready = now;
    if (active < 0 && started < completed) {
      active = static_cast<int>(started++);
      left = buckets[active].seconds;
      schedule[active].start = now;
    }
    const bool computing = work < profile.backward;
    if (!computing && out.backward_end < 0.0) out.backward_end = now;
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
      schedule[active].end = now;
      out.busy += now - schedule[active].start;
      active = -1;
    }
  }
  out.link_free = buckets.empty() ? 0.0 : schedule.back().end;
  return out;
}

// All-reduce, ZeRO and local SGD: every replica steps, in step with the others.
ScalingPrediction predict_replicated(const StepProfile& profile, const ScalingSetup& setup) {
  ScalingPrediction out;
  const int d = setup.devices_per_host, h = setup.hosts;
  const int replicas = d * h;
  // A small collective crosses both levels.
  const double small = setup.between_hosts.small_seconds(h) + setup.local.small_seconds(d);
  std::vector<Bucket> buckets;
  if (replicas > 1 && setup.mode != UpdateMode::local_sgd && !profile.gradients.empty())
    buckets = plan_buckets(profile, setup, small, out.buckets);
  const Overlap overlap = overlap_backward(profile, buckets, out.buckets);
  // Without sharing the events add up to backward's end but for rounding.
  out.compute_slowdown = std::max(0.0, overlap.backward_end - (profile.forward + profile.backward));
  out.exposed_communication = std::max(0.0, overlap.link_free - overlap.backward_end);
  out.communication_busy = overlap.busy;
  out.small_collectives = small * setup.small_collectives_per_step;
  out.optimizer = profile.optimizer;
  if (setup.mode == UpdateMode::zero1 || setup.mode == UpdateMode::zero2) {
    // Each replica updates its shard, then every bucket's shards are
    // all-gathered, after the update (not overlapped).
    out.optimizer /= replicas;
    for (const BucketSchedule& b : out.buckets) {
      const double bytes = 4.0 * static_cast<double>(b.elements);
      out.update_communication +=
          setup.local.half_ring_seconds(bytes, d) + setup.between_hosts.half_ring_seconds(bytes, h);
    }
  } else if (setup.mode == UpdateMode::local_sgd && replicas > 1) {
    // Every K steps each parameter is all-reduced on its own, in f32.
    double average = 0.0;
    for (const StepProfile::Gradient& g : profile.gradients) {
      const double bytes = 4.0 * static_cast<double>(g.elements);
      average += setup.local.all_reduce_seconds(bytes, d) +
                 setup.between_hosts.all_reduce_seconds(bytes, h);
    }
    out.update_communication = average / setup.sync_every;
  }
  out.step = profile.forward + profile.backward + out.optimizer + profile.other +
             out.compute_slowdown + out.exposed_communication + out.small_collectives +
             out.update_communication;
  return out;
}

// The parameter server: each worker pulls the parameters, computes its share
// (forward, backward, the rest) and pushes the gradient; the shard ranks
// apply the updates. A worker's host link carries its host's workers'
// traffic; each shard rank's link carries its part of every worker's.
// Synchronous rounds: every worker pulls at once, computes and pushes at
// once, then the shards update. Asynchronous: each worker goes at its own
// pace, and a transfer shares each link with the other workers' transfers
// in the same direction, found at random phases: it is stretched by
// 1 / (1 - the others' use of the link), the use depending on the cycle
// it stretches (solved for the cycle). Measured over the test hosts (2
// workers, one shard rank, 1 Gbit/s) the workers neither keep out of each
// other's way nor go in lock step: a share's transfers took 66 ms where
// they take 45 alone and 90 in step; this gives 66.
ScalingPrediction predict_parameter_server(const StepProfile& profile, const ScalingSetup& setup) {
  ScalingPrediction out;
  const int d = setup.devices_per_host, h = setup.hosts;
  const double workers = static_cast<double>(d) * h;
  const LinkModel& link = h > 1 ? setup.between_hosts : setup.local;
  double elements = 0.0;
  for (const StepProfile::Gradient& g : profile.gradients)
    elements += static_cast<double>(g.elements);
  const double shards = setup.ps_shards;
  const double compute = profile.forward + profile.backward + profile.other;
  if (!(link.bus_bandwidth > 0.0)) {  // one worker on one host: nothing travels
    out.step = compute + profile.optimizer;
    out.optimizer = profile.optimizer;
    return out;
  }
  // A share's parameters (or gradient) through a worker's host link, and
  // its part through each shard rank's.
  const double host_way = 4.0 * elements / link.bus_bandwidth;
  const double shard_way = host_way / shards;
  if (setup.mode == UpdateMode::ps_synchronous) {
    const double phase = link.latency + std::max(workers * shard_way, d * host_way);
    out.optimizer = profile.optimizer / shards;  // each shard rank updates its part
    out.step = 2.0 * phase + compute + out.optimizer;
  } else {
    // A worker's cycle T: two transfers, each stretched by the others' use
    // of the links (their transfer time over T), and its compute.
    const auto excess = [&](double cycle) -> double {
      const double host_use = (d - 1) * host_way / cycle;
      const double shard_use = (workers - 1.0) * shard_way / cycle;
      if (host_use >= 1.0 || shard_use >= 1.0) return -INFINITY;
      const double transfer =
          link.latency + std::max(host_way / (1.0 - host_use), shard_way / (1.0 - shard_use));
      return cycle - 2.0 * transfer - compute;
    };
    double low = 0.0, high = 2.0 * (link.latency + host_way + workers * shard_way) + compute;
    while (excess(high) < 0.0) high *= 2.0;
    for (int i = 0; i < 200 && high - low > 1e-12 * high; ++i)
      (excess(0.5 * (low + high)) < 0.0 ? low : high) = 0.5 * (low + high);
    // The shard ranks apply one update per share.
    out.step = std::max(high, workers * profile.optimizer / shards);
  }
  out.update_communication = out.step - compute - out.optimizer;
  return out;
}

}  // namespace

ScalingPrediction predict_scaling(const StepProfile& profile, const ScalingSetup& setup) {
  check_inputs(profile, setup);
  ScalingPrediction out = parameter_server(setup.mode) ? predict_parameter_server(profile, setup)
                                                       : predict_replicated(profile, setup);
  const double devices = static_cast<double>(setup.hosts) * setup.devices_per_host;
  out.examples_per_second = devices * static_cast<double>(profile.examples) / out.step;
  out.efficiency = profile.one_device_step() / out.step;
  return out;
}

}  // namespace tandem::train
