#pragma once
// The scaling planner (`tandem plan scaling`, docs/multi_host.md): the step
// time of data-parallel training on D devices per host x H hosts, predicted
// from a one-device profile and a model of the links, before anyone runs
// (or buys) the hosts. The model follows what the engine does: backward
// produces the gradients in reverse parameter order; the Reducer packs them
// into fusion buckets and all-reduces each bucket, one after another on its
// communication thread, as soon as backward has completed it (each with a
// small call check); the step ends after the last bucket and the
// optimizer; a few small collectives per step (the Trainer's agreement, the
// engine's record exchange, the noise scale's norms) sit on the critical
// path. Weak scaling: every device keeps the profile's batch.
// Communication and compute share a host's cores (MPI's polling, the
// kernel's TCP copies, the wire compression's conversions): while a
// bucket's all-reduce overlaps backward, each goes at the speed `tandem
// bench allreduce --busy-threads` measured for the two running at once, as
// a fraction of its speed alone; a host with a core to spare for
// communication runs both at full speed.
//
// The other ways of keeping replicas in step (UpdateMode) follow their
// engines too: ZeRO shards the update and gathers the parameters after it;
// local SGD averages the parameters every K steps instead; the parameter
// server's workers pull the parameters and push the gradient with every
// share, through the shard ranks' links.

#include <cstdint>
#include <utility>
#include <vector>

namespace tandem::train {

// One all-reduce over `ranks` ranks of a link level: a small collective's
// time, then the bus bytes (2 (n - 1) / n of the buffer: what a ring moves
// through each rank's link) at the bus bandwidth. A small collective takes
// log2(n) steps of the latency (recursive doubling or a tree, as MPI and
// NCCL do for small buffers; a ring's 2 (n - 1) steps only pay for large
// ones). One rank costs nothing.
struct LinkModel {
  double latency = 0.0;        // seconds: a small collective's time between 2 ranks
  double bus_bandwidth = 0.0;  // bytes per second
  // While the host computes: a large all-reduce's speed, and compute's, as
  // fractions of each one's speed alone (1: they do not interfere, as for a
  // link given as numbers).
  double shared_speed = 1.0;
  double compute_speed = 1.0;
  double small_seconds(int ranks) const;
  double all_reduce_seconds(double bytes, int ranks) const;
  // A reduce-scatter or an all-gather: one of a ring's two halves, (n - 1) / n
  // of the buffer through each link.
  double half_ring_seconds(double bytes, int ranks) const;
  // One message between two ranks: a small collective's time and the bytes
  // at the link rate (a ring's bus bandwidth is its links' rate).
  double transfer_seconds(double bytes) const;
};

// One row of `tandem bench allreduce --json`: a buffer's bytes and the time
// of one all-reduce; with --busy-threads also its time while the ranks'
// hosts compute and compute's speed then (a fraction of its speed alone).
struct MeasuredAllReduce {
  double bytes = 0.0, seconds = 0.0;
  double busy_seconds = 0.0;  // 0: not measured
  double busy_compute_rate = 1.0;
};

// A link model from measured all-reduces over `ranks` ranks: the latency is
// the smallest buffer's time (over log2(ranks) steps); over the buffers of
// 1 MiB and more (the largest buffer when none is that large), the bandwidth
// is the median, the all-reduce's shared speed its summed time alone over
// its summed time beside compute, and compute's the mean. Throws InvalidArgument for an
// empty table, non-positive sizes or times, or a compute rate outside (0, 2].
LinkModel fit_link(const std::vector<MeasuredAllReduce>& table, int ranks);

struct StepProfile {
  // Seconds of one device's step: its forward, backward and optimizer, and
  // the rest (input, the framework's hand-offs).
  double forward = 0.0, backward = 0.0, optimizer = 0.0, other = 0.0;
  int64_t examples = 0;  // per device and step
  struct Gradient {
    int64_t elements = 0;  // f32 elements
    double ready = 1.0;    // when backward completes it, as a fraction of backward (0 to 1)
  };
  std::vector<Gradient> gradients;  // in the order backward produces them
  double one_device_step() const { return forward + backward + optimizer + other; }
};

// How the replicas keep their parameters in step: the training flags that
// choose it (docs/memory.md, docs/sync_async.md).
enum class UpdateMode {
  all_reduce,  // each step's gradients all-reduced in buckets (the default)
  zero1,       // --zero 1: all-reduce; each replica updates 1/N and the parameters are all-gathered
  zero2,       // --zero 2: each bucket reduce-scattered; the same update and all-gather
  local_sgd,   // --sync-every K: parameters all-reduced every K steps, tensor by tensor
  ps_synchronous,   // --strategy parameter-server --max-staleness 0: rounds of every worker
  ps_asynchronous,  // --strategy parameter-server: each share applied on its own
};

struct ScalingSetup {
  UpdateMode mode = UpdateMode::all_reduce;
  int sync_every = 8;  // local SGD's K
  // Parameter server: shard ranks (--ps), each on a link of its own of the
  // hosts' rate (or the local one on one host); every device is a worker.
  int ps_shards = 1;
  int hosts = 1;
  int devices_per_host = 1;
  LinkModel local;          // between the devices of a host (replica threads of one process)
  LinkModel between_hosts;  // between the hosts' processes
  int64_t bucket_bytes = int64_t{25} << 20;  // of f32 gradient, as --bucket-mb
  int64_t first_bucket_bytes = int64_t{1} << 20;
  // Bytes per gradient element as the hosts' link model counts them: 4 (f32,
  // or a link measured with the compressed all-reduce itself, whose table
  // counts the f32 buffer), 2 (bf16 or f16 on a link measured in f32).
  int wire_bytes = 4;
  // Each host keeps a core that compute does not use for communication.
  bool spare_core = false;
  // Small collectives per step outside the buckets; each bucket adds one
  // (its call check).
  int small_collectives_per_step = 6;
};

struct BucketSchedule {
  int64_t elements = 0;
  double ready = 0.0, start = 0.0, end = 0.0;  // seconds from the step's start
};

struct ScalingPrediction {
  // Seconds; under the parameter server, the time for every worker to
  // compute one share (devices x the profile's examples), as a synchronous
  // step trains.
  double step = 0.0;
  double optimizer = 0.0;              // a device's update (1/N of it under ZeRO; 0 on a worker)
  double exposed_communication = 0.0;  // bucket all-reduces not hidden behind backward
  // Communication outside backward: ZeRO's all-gather, local SGD's average
  // (per step), the parameter server's pull and push and the wait for the
  // servers' links.
  double update_communication = 0.0;
  double small_collectives = 0.0;       // the per-step small collectives
  double communication_busy = 0.0;      // the buckets' all-reduces, hidden or not
  double compute_slowdown = 0.0;        // backward's extension while it shares the cores with them
  double examples_per_second = 0.0;     // all devices
  double efficiency = 0.0;              // of devices x the one-device throughput
  std::vector<BucketSchedule> buckets;  // in launch order
};

// Throws InvalidArgument for fewer than one host or device, a profile
// without examples or with negative times, a link model without bandwidth
// where one is needed, a mode's count below 1, or a compressed wire with a
// mode that sends f32 (ZeRO-2, local SGD, the parameter server).
ScalingPrediction predict_scaling(const StepProfile& profile, const ScalingSetup& setup);

}  // namespace tandem::train
