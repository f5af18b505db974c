// The scaling planner against schedules worked out by hand.
#include "tandem/train/scaling_plan.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tandem/base/error.h"

namespace tandem::train {
namespace {

StepProfile profile(std::vector<StepProfile::Gradient> gradients) {
  StepProfile p;
  p.forward = 1.0;
  p.backward = 2.0;
  p.optimizer = 0.5;
  p.other = 0.5;
  p.examples = 100;
  p.gradients = std::move(gradients);
  return p;
}

ScalingSetup two_hosts(int wire_bytes = 4) {
  ScalingSetup s;
  s.hosts = 2;
  s.between_hosts = {.latency = 0.01, .bus_bandwidth = 4e6};
  s.bucket_bytes = 1 << 20;
  s.first_bucket_bytes = 1 << 20;
  s.wire_bytes = wire_bytes;
  s.small_collectives_per_step = 6;
  return s;
}

TEST(ScalingPlan, OneDeviceIsTheProfile) {
  const ScalingPrediction p = predict_scaling(profile({{1000, 1.0}}), {});
  EXPECT_DOUBLE_EQ(p.step, 4.0);
  EXPECT_DOUBLE_EQ(p.efficiency, 1.0);
  EXPECT_DOUBLE_EQ(p.examples_per_second, 25.0);
  EXPECT_TRUE(p.buckets.empty());
}

TEST(ScalingPlan, ALastGradientIsAllExposed) {
  // 4 MB of f32 at a bus bandwidth of 4 MB/s between 2 hosts: 1 s, plus the
  // bucket's call check and the all-reduce's latency (0.01 s each), after
  // backward; then 6 small collectives.
  const ScalingPrediction p = predict_scaling(profile({{1000000, 1.0}}), two_hosts());
  ASSERT_EQ(p.buckets.size(), 1u);
  EXPECT_DOUBLE_EQ(p.buckets[0].ready, 3.0);
  EXPECT_NEAR(p.exposed_communication, 1.02, 1e-12);
  EXPECT_NEAR(p.small_collectives, 0.06, 1e-12);
  EXPECT_NEAR(p.step, 4.0 + 1.02 + 0.06, 1e-12);
  EXPECT_NEAR(p.efficiency, 4.0 / 5.08, 1e-12);
  EXPECT_NEAR(p.examples_per_second, 200.0 / 5.08, 1e-9);
}

TEST(ScalingPlan, AnEarlierBucketHidesBehindBackwardAndBf16HalvesTheWire) {
  // Two 1 MiB gradients, ready half-way through backward and at its end:
  // two buckets; the first (0.02 + 1,048,576 / 4e6 s) ends before the
  // second is ready, which alone is exposed.
  const std::vector<StepProfile::Gradient> g = {{262144, 0.5}, {262144, 1.0}};
  const double bucket = 0.02 + 1048576.0 / 4e6;
  const ScalingPrediction f32 = predict_scaling(profile(g), two_hosts(4));
  ASSERT_EQ(f32.buckets.size(), 2u);
  EXPECT_DOUBLE_EQ(f32.buckets[0].start, 2.0);
  EXPECT_NEAR(f32.buckets[0].end, 2.0 + bucket, 1e-12);
  EXPECT_DOUBLE_EQ(f32.buckets[1].start, 3.0);
  EXPECT_NEAR(f32.exposed_communication, bucket, 1e-12);
  EXPECT_NEAR(f32.communication_busy, 2 * bucket, 1e-12);
  const ScalingPrediction bf16 = predict_scaling(profile(g), two_hosts(2));
  EXPECT_NEAR(bf16.exposed_communication, 0.02 + 524288.0 / 4e6, 1e-12);
}

TEST(ScalingPlan, BucketsQueueBehindEachOtherOnTheLink) {
  // Both ready early, the second waits for the first.
  const std::vector<StepProfile::Gradient> g = {{262144, 0.1}, {262144, 0.2}};
  ScalingSetup s = two_hosts();
  s.between_hosts.bus_bandwidth = 1e6;  // about 1.05 s a bucket
  const ScalingPrediction p = predict_scaling(profile(g), s);
  ASSERT_EQ(p.buckets.size(), 2u);
  EXPECT_DOUBLE_EQ(p.buckets[1].start, p.buckets[0].end);
  EXPECT_NEAR(p.exposed_communication, p.buckets[1].end - 3.0, 1e-12);
}

TEST(ScalingPlan, DevicesOfAHostAddTheirInProcessPhase) {
  ScalingSetup s = two_hosts();
  s.devices_per_host = 2;
  s.local = {.latency = 0.001, .bus_bandwidth = 4e7};
  const ScalingPrediction p = predict_scaling(profile({{1000000, 1.0}}), s);
  // Small collectives cross both levels; the host's replicas reduce in f32.
  const double small = 0.01 + 0.001;
  EXPECT_NEAR(p.exposed_communication, small + (0.001 + 4e6 / 4e7) + (0.01 + 1.0), 1e-12);
  EXPECT_NEAR(p.small_collectives, 6 * small, 1e-12);
  EXPECT_NEAR(p.examples_per_second, 400.0 / p.step, 1e-9);
}

TEST(ScalingPlan, AnAllReduceAndTheBackwardItOverlapsGoAtTheirSharedSpeeds) {
  // Two 1 MiB gradients, ready half-way through backward and at its end, on
  // a link without latency (a bucket: 0.262144 s alone) whose all-reduce and
  // compute each go at half speed while both run: the first bucket takes
  // twice as long, backward ends one bucket's time later, nothing is hidden.
  const std::vector<StepProfile::Gradient> g = {{262144, 0.5}, {262144, 1.0}};
  const double bucket = 1048576.0 / 4e6;
  ScalingSetup s = two_hosts();
  s.between_hosts = {
      .latency = 0.0, .bus_bandwidth = 4e6, .shared_speed = 0.5, .compute_speed = 0.5};
  const ScalingPrediction shared = predict_scaling(profile(g), s);
  ASSERT_EQ(shared.buckets.size(), 2u);
  EXPECT_DOUBLE_EQ(shared.buckets[0].start, 2.0);
  EXPECT_NEAR(shared.buckets[0].end, 2.0 + 2.0 * bucket, 1e-12);
  EXPECT_NEAR(shared.compute_slowdown, bucket, 1e-12);
  EXPECT_NEAR(shared.buckets[1].ready, 3.0 + bucket, 1e-12);
  EXPECT_NEAR(shared.exposed_communication, bucket, 1e-12);
  EXPECT_NEAR(shared.step, 4.0 + 2.0 * bucket, 1e-12);
  // A core to spare: the plan without sharing.
  s.spare_core = true;
  const ScalingPrediction spare = predict_scaling(profile(g), s);
  EXPECT_DOUBLE_EQ(spare.compute_slowdown, 0.0);
  EXPECT_NEAR(spare.step, 4.0 + bucket, 1e-12);
  // An all-reduce nearly stalled by compute (10%) while compute keeps 90%:
  // the bucket waits out backward, slowed by a tenth, then runs alone.
  s.spare_core = false;
  s.between_hosts.shared_speed = 0.1;
  s.between_hosts.compute_speed = 0.9;
  const ScalingPrediction stalled = predict_scaling(profile(g), s);
  const double overlap = 1.0 / 0.9;  // backward's second half, at 90%
  EXPECT_NEAR(stalled.compute_slowdown, overlap - 1.0, 1e-12);
  EXPECT_NEAR(stalled.buckets[0].end, 2.0 + overlap + (bucket - 0.1 * overlap), 1e-12);
  EXPECT_NEAR(stalled.buckets[1].end, stalled.buckets[0].end + bucket, 1e-12);
  // Speeds outside (0, 1] are refused.
  s.between_hosts.shared_speed = 0.0;
  EXPECT_THROW(predict_scaling(profile(g), s), InvalidArgument);
}

TEST(ScalingPlan, LinkFitTakesTheSmallestTimeAndTheMedianLargeBandwidth) {
  std::vector<MeasuredAllReduce> table;
  for (double bytes = 4; bytes <= 256.0 * (1 << 20); bytes *= 4) {
    const double seconds = 2e-5 + bytes / 1e9;
    // While busy, the large buffers take 4x as long and leave compute 70%;
    // the small ones' shared speeds do not count.
    const bool large = bytes >= (1 << 20);
    table.push_back({bytes, seconds, (large ? 4.0 : 1.5) * seconds, large ? 0.7 : 0.2});
  }
  // One of them slower beside compute, and compute slower too: the sums
  // of times and the mean of compute's speeds.
  table.back().busy_seconds = 8.0 * table.back().seconds;
  table.back().busy_compute_rate = 0.3;
  double alone = 0.0, busy = 0.0, rates = 0.0, large = 0.0;
  for (const MeasuredAllReduce& m : table) {
    if (m.bytes < (1 << 20)) continue;
    alone += m.seconds, busy += m.busy_seconds, rates += m.busy_compute_rate, large += 1.0;
  }
  const LinkModel link = fit_link(table, 2);
  EXPECT_DOUBLE_EQ(link.latency, 2e-5 + 4 / 1e9);
  EXPECT_NEAR(link.bus_bandwidth, 1e9, 0.01e9);
  EXPECT_NEAR(link.shared_speed, alone / busy, 1e-12);
  EXPECT_NEAR(link.compute_speed, rates / large, 1e-12);
  EXPECT_LT(link.shared_speed, 0.25);
  EXPECT_LT(link.compute_speed, 0.7);
  // Without busy measurements nothing interferes.
  EXPECT_EQ(fit_link({{1 << 20, 1.0}}, 2).shared_speed, 1.0);
  // Over 4 ranks a ring moves 1.5x the buffer through each link, and a
  // small collective took log2(4) = 2 latencies.
  const LinkModel four = fit_link({{8, 0.5}, {1 << 20, 1.0}}, 4);
  EXPECT_NEAR(four.bus_bandwidth, 1.5 * (1 << 20), 1e-6);
  EXPECT_DOUBLE_EQ(four.latency, 0.25);
  EXPECT_DOUBLE_EQ(four.small_seconds(8), 0.75);
  EXPECT_DOUBLE_EQ(four.small_seconds(1), 0.0);
  EXPECT_DOUBLE_EQ(four.all_reduce_seconds(1 << 20, 8), 0.75 + 1.75 / 1.5);
}

TEST(ScalingPlan, ZeroShardsTheUpdateAndGathersTheParametersAfterIt) {
  // One 4 MB gradient between 2 hosts at 4 MB/s (see ALastGradientIsAllExposed:
  // its all-reduce takes 1.01 s and its call check 0.01 s).
  const StepProfile one = profile({{1000000, 1.0}});
  ScalingSetup s = two_hosts();
  s.mode = UpdateMode::zero1;
  ScalingPrediction p = predict_scaling(one, s);
  // The all-reduce as without ZeRO; half the optimizer; the all-gather of
  // the parameters: half a ring (0.01 + 2 MB / 4 MB/s).
  EXPECT_NEAR(p.exposed_communication, 1.02, 1e-12);
  EXPECT_NEAR(p.optimizer, 0.25, 1e-12);
  EXPECT_NEAR(p.update_communication, 0.51, 1e-12);
  EXPECT_NEAR(p.step, 5.08 - 0.25 + 0.51, 1e-12);
  // ZeRO-2 reduce-scatters instead: half a ring too.
  s.mode = UpdateMode::zero2;
  p = predict_scaling(one, s);
  EXPECT_NEAR(p.exposed_communication, 0.52, 1e-12);
  EXPECT_NEAR(p.step, 4.0 - 0.25 + 0.52 + 0.06 + 0.51, 1e-12);
  // With 2 devices per host it reduces in the process (an in-process
  // all-reduce: 1 ms + 4 MB at 40 MB/s) before the hosts' reduce-scatter.
  s.devices_per_host = 2;
  s.local = {.latency = 0.001, .bus_bandwidth = 4e7};
  p = predict_scaling(one, s);
  EXPECT_NEAR(p.buckets.at(0).end - p.buckets.at(0).start, 0.011 + 0.101 + 0.51, 1e-12);
  EXPECT_NEAR(p.optimizer, 0.125, 1e-12);
  s.wire_bytes = 2;  // ZeRO-2 sends f32
  EXPECT_THROW(predict_scaling(one, s), InvalidArgument);
}

TEST(ScalingPlan, LocalSgdAveragesEachParameterEveryKSteps) {
  ScalingSetup s = two_hosts();
  s.mode = UpdateMode::local_sgd;
  s.sync_every = 4;
  const ScalingPrediction p = predict_scaling(profile({{500000, 1.0}, {500000, 0.5}}), s);
  // Two all-reduces of 2 MB (0.01 + 0.5 s each) every 4 steps; no buckets.
  EXPECT_TRUE(p.buckets.empty());
  EXPECT_DOUBLE_EQ(p.exposed_communication, 0.0);
  EXPECT_NEAR(p.update_communication, 1.02 / 4, 1e-12);
  EXPECT_NEAR(p.step, 4.0 + 0.06 + 1.02 / 4, 1e-12);
  s.sync_every = 0;
  EXPECT_THROW(predict_scaling(profile({{10, 1.0}}), s), InvalidArgument);
}

TEST(ScalingPlan, ParameterServerTransfersShareTheShardRanksLinks) {
  // 4 MB of parameters at 4 MB/s: a pull or a push alone takes 0.01 + 1 s;
  // a worker computes forward, backward and the rest (3.5 s), the shard
  // ranks update.
  const StepProfile one = profile({{1000000, 1.0}});
  ScalingSetup s = two_hosts();
  s.mode = UpdateMode::ps_asynchronous;
  s.hosts = 1;  // one worker: nothing shares its links
  s.local = s.between_hosts;
  EXPECT_NEAR(predict_scaling(one, s).step, 2.02 + 3.5, 1e-9);
  // Two workers, one shard rank: each transfer is stretched by the other
  // worker's use of the shard's link, 1 s of each cycle T, so
  // T = 2 (0.01 + 1 / (1 - 1 / T)) + 3.5: T^2 - 6.52 T + 3.52 = 0.
  s.hosts = 2;
  ScalingPrediction p = predict_scaling(one, s);
  const double cycle = (6.52 + std::sqrt(6.52 * 6.52 - 4 * 3.52)) / 2;
  EXPECT_NEAR(p.step, cycle, 1e-9);
  EXPECT_DOUBLE_EQ(p.optimizer, 0.0);
  EXPECT_NEAR(p.update_communication, cycle - 3.5, 1e-9);
  EXPECT_NEAR(p.examples_per_second, 200.0 / cycle, 1e-6);
  // Two shard ranks halve that use; each worker's own link (1 s) is then
  // the longer way.
  s.ps_shards = 2;
  EXPECT_NEAR(predict_scaling(one, s).step, 5.52, 1e-9);
  // Updates slower than the transfers set the pace: 2 shares of 10 s.
  StepProfile slow_update = one;
  slow_update.optimizer = 10.0;
  s.ps_shards = 1;
  EXPECT_NEAR(predict_scaling(slow_update, s).step, 20.0, 1e-9);
  // Synchronous rounds, 2 workers and one shard: both workers' pulls, then
  // both pushes, through its link (0.01 + 2 s each), then the update.
  s = two_hosts();
  s.mode = UpdateMode::ps_synchronous;
  p = predict_scaling(one, s);
  EXPECT_NEAR(p.step, 2 * 2.01 + 3.5 + 0.5, 1e-12);
  EXPECT_NEAR(p.update_communication, 2 * 2.01, 1e-12);
  s.ps_shards = 0;
  EXPECT_THROW(predict_scaling(one, s), InvalidArgument);
}

TEST(ScalingPlan, ImpossibleSetupsAreRefused) {
  ScalingSetup s = two_hosts();
  s.hosts = 0;
  EXPECT_THROW(predict_scaling(profile({{10, 1.0}}), s), InvalidArgument);
  s = two_hosts();
  s.between_hosts.bus_bandwidth = 0.0;
  EXPECT_THROW(predict_scaling(profile({{10, 1.0}}), s), InvalidArgument);
  s = two_hosts(3);
  EXPECT_THROW(predict_scaling(profile({{10, 1.0}}), s), InvalidArgument);
  StepProfile bad = profile({{10, 1.5}});
  EXPECT_THROW(predict_scaling(bad, two_hosts()), InvalidArgument);
  bad = profile({{10, 1.0}});
  bad.forward = -1.0;
  EXPECT_THROW(predict_scaling(bad, two_hosts()), InvalidArgument);
  EXPECT_THROW(fit_link({}, 2), InvalidArgument);
  EXPECT_THROW(fit_link({{0.0, 1.0}}, 2), InvalidArgument);
  EXPECT_THROW(fit_link({{10.0, 1.0}}, 1), InvalidArgument);
  EXPECT_THROW(fit_link({{10.0, 1.0, -0.5}}, 2), InvalidArgument);
  EXPECT_THROW(fit_link({{10.0, 1.0, 2.0, 0.0}}, 2), InvalidArgument);
}

}  // namespace
}  // namespace tandem::train
