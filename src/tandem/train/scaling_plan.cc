#include "tandem/train/scaling_plan.h"

#include <algorithm>
#include <cmath>

#include "tandem/base/error.h"
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

LinkModel fit_link(const std::vector<std::pair<double, double> >& bytes_and_seconds, int ranks) {
  if (bytes_and_seconds.empty())
    TANDEM_THROW(InvalidArgument, "a link model needs at least one measured all-reduce");
  if (ranks < 2) TANDEM_THROW(InvalidArgument, "a link model needs 2 or more ranks, got ", ranks);
  for (const auto& [bytes, seconds] : bytes_and_seconds) {
    if (!(bytes > 0.0) || !(seconds > 0.0) || !std::isfinite(bytes) || !std::isfinite(seconds)) {
      TANDEM_THROW(InvalidArgument, "a measured all-reduce needs positive bytes and time, got ",
                   bytes, " bytes in ", seconds, " s");
    }
  }
  std::vector<std::pair<double, double> > sorted = bytes_and_seconds;
  std::sort(sorted.begin(), sorted.end());
  const double factor = 2.0 * (ranks - 1) / ranks;
  std::vector<double> large;
  for (const auto& [bytes, seconds] : sorted)
    if (bytes >= (1 << 20)) large.push_back(factor * bytes / seconds);
  if (large.empty()) large.push_back(factor * sorted.back().first / sorted.back().second);
  std::sort(large.begin(), large.end());
  const size_t n = large.size();
  const double bandwidth = n % 2 == 1 ? large[n / 2] : 0.5 * (large[n / 2 - 1] + large[n / 2]);
  return {.latency = sorted.front().second / std::log2(static_cast<double>(ranks)),
          .bus_bandwidth = bandwidth};
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
  const double backward_end = profile.forward + profile.backward;
  double link_free = 0.0;
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
    const comm::Bucketer buckets(layouts, {.bucket_bytes = setup.bucket_bytes,
                                           .first_bucket_bytes = setup.first_bucket_bytes,
                                           .allocate = false});
    for (size_t b = 0; b < buckets.bucket_count(); ++b) {
      double ready = 0.0;
      for (size_t t : buckets.tensors_in(b)) ready = std::max(ready, profile.gradients[t].ready);
      BucketSchedule s;
      s.elements = buckets.bucket_elements(b);
      s.ready = profile.forward + ready * profile.backward;
      s.start = std::max(s.ready, link_free);
      // The replicas of a host reduce in f32 in memory; the hosts exchange the wire dtype.
      const double seconds =
          small +
          setup.local.all_reduce_seconds(4.0 * static_cast<double>(s.elements),
                                         setup.devices_per_host) +
          (across_hosts
               ? setup.between_hosts.all_reduce_seconds(
                     static_cast<double>(setup.wire_bytes) * static_cast<double>(s.elements),
                     setup.hosts)
               : 0.0);
      s.end = s.start + seconds;
      link_free = s.end;
      out.communication_busy += seconds;
      out.buckets.push_back(s);
    }
  }
  out.exposed_communication = std::max(0.0, link_free - backward_end);
  out.small_collectives = small * setup.small_collectives_per_step;
  out.step = profile.one_device_step() + out.exposed_communication + out.small_collectives;
  const double devices = static_cast<double>(setup.hosts) * setup.devices_per_host;
  out.examples_per_second = devices * static_cast<double>(profile.examples) / out.step;
  out.efficiency = profile.one_device_step() / out.step;
  return out;
}

}  // namespace tandem::train
