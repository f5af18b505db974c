#pragma once
// Reducer: PyTorch DDP's gradient synchronisation. The parameters' gradients
// are views into fusion buckets laid out in reverse parameter order (the order
// backward produces them). Protocol for one step, on every replica:
//  1. prepare(): before backward. With synchronize = false (gradient
//     accumulation, DDP's no_sync) gradients only accumulate locally.
//  2. During backward, each parameter's gradient-ready hook marks it; when
//     every parameter of a bucket is ready, and every earlier bucket has been
//     launched, the bucket's all-reduce (sum) starts asynchronously, so
//     communication overlaps the rest of backward. Launching strictly in
//     bucket order keeps the replicas' collective sequences identical.
//  3. finish(): after backward. Launches the buckets still waiting (their
//     parameters that received no gradient are zeroed first), waits for all,
//     and marks every gradient defined, so all replicas step all parameters.
// The loss must be normalised by the global example count: the sum of the
// replicas' gradients is then the global mean gradient.
//
// ZeRO (ReducerOptions::zero_stage, DeepSpeed's stages): buckets are padded
// to a multiple of the replica count N, and replica r owns shard r (the
// r-th N-th) of every bucket, which a ShardedOptimizer updates.
//  - Stage 1: as above (all-reduce into the buckets); shard_gradient(b) is
//    a view of the reduced bucket.
//  - Stage 2: no replica keeps a whole gradient. Buckets are staged through
//    kStagingSlots flat buffers used in turn (bucket b in slot b mod
//    kStagingSlots). A bucket that holds its slot has its parameters'
//    gradient buffers pointing into it, so backward computes them there;
//    when a bucket is complete it is reduce-scattered into this replica's
//    shard, and the parameters' gradients are released. The first buckets
//    take their slots in prepare(); when bucket b launches, buckets up to
//    b + kStagingSlots - 1 take theirs, after waiting for the
//    reduce-scatters of the buckets before b (which ran while backward
//    computed bucket b). A gradient
//    produced before its bucket holds a slot (out of order, or with
//    overlap off) lives in a buffer of its own until it is copied in. There
//    is no accumulation without synchronising: each micro-batch is reduced,
//    its bucket carrying the shard so far in this replica's own chunk, so
//    that the reduce-scatter adds them (prepare's accumulate).

#include <chrono>
#include <memory>
#include <string_view>
#include <vector>

#include "tandem/autograd/variable.h"
#include "tandem/comm/bucketer.h"
#include "tandem/comm/communicator.h"
#include "tandem/comm/compression.h"

namespace tandem::distribute {

struct ReducerOptions {
  int64_t bucket_bytes = int64_t{25} << 20;
  int64_t first_bucket_bytes = int64_t{1} << 20;
  comm::WireDType wire = comm::WireDType::f32;  // bf16/f16: compressed all-reduce
  // true: all-reduce each bucket as soon as backward completes it, on the
  // communicator's progress thread; false: all buckets after backward, on the
  // replica's own thread (no extra thread competing for the cores).
  bool overlap = true;
  // 0: plain all-reduce; 1 or 2: ZeRO's stages (see above). Stage 2 takes
  // the f32 wire only.
  int zero_stage = 0;
};

// What the last step's reduction did. (The step's timeline, when backward
// ended and when gradients were reduced, is the Trainer's StepInfo::replicas.)
struct ReducerStats {
  int64_t buckets_launched = 0;
  int64_t bytes_reduced = 0;  // f32 bytes of the buckets
  // Each bucket's all-reduce: bytes on the wire and how long the collective
  // ran (Work::started to finished: from when every rank had arrived, on
  // backends that can tell, so waiting for slower replicas is not counted).
  struct Bucket {
    int64_t wire_bytes = 0;
    double seconds = 0.0;
    std::string_view algorithm;  // Communicator::all_reduce_algorithm (a literal)
  };
  std::vector<Bucket> buckets;
  // With prepare(..., measure_norms): sums of squares (in double) of this
  // replica's gradients before their reduction (its buckets as launched) and
  // of its share of the reduced ones (the buckets b with b mod N == rank, or
  // its shards under ZeRO-2): the shares over the replicas add up to the
  // reduced gradient's.
  double local_squares = 0.0;
  double reduced_squares = 0.0;
};

class Reducer {
 public:
  // parameters: the replica's parameters in model order (f32). Installs
  // gradient buffers (bucket views) and hooks on them.
  Reducer(std::vector<Variable> parameters, comm::Communicator& comm, ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before a backward pass. synchronize = false: gradients accumulate
  // locally (not under ZeRO-2, InvalidArgument). accumulate (ZeRO-2): add
  // this pass's reduced shard to the previous ones' instead of replacing
  // them. measure_norms: fill last_step()'s sums of squares.
  void prepare(bool synchronize = true, bool accumulate = false, bool measure_norms = false);
  void finish();

  size_t bucket_count() const { return bucketer_->bucket_count(); }
  const ReducerStats& last_step() const { return last_; }
  // The bucket layout (parameters in reverse order, padded under ZeRO).
  const comm::Bucketer& bucketer() const { return *bucketer_; }
  // ZeRO: this replica's shard of bucket b's reduced gradient (valid after
  // finish(); stage 1: a view into the bucket).
  Tensor shard_gradient(size_t bucket) const;
  int zero_stage() const { return options_.zero_stage; }

  // ZeRO-2: the number of buckets staged at once.
  static constexpr size_t kStagingSlots = 3;

 private:
  std::chrono::milliseconds backstop_timeout() const;
  void on_ready(size_t parameter);
  void launch_ready_buckets();
  void launch(size_t bucket);
  void launch_reduce_scatter(size_t bucket);
  // ZeRO-2: gives bucket b its staging slot (its parameters' gradient
  // buffers become views of it), after waiting for the reduce-scatter of the
  // bucket that used the slot before (launched already).
  void wait_for_slot(size_t bucket);
  void take_slot(size_t bucket);
  void stage_gradient(size_t parameter);
  void record(size_t bucket, const comm::Work& work);

  std::vector<Variable> parameters_;
  comm::Communicator& comm_;
  ReducerOptions options_;
  std::unique_ptr<comm::Bucketer> bucketer_;
  std::vector<size_t> bucket_of_parameter_;
  std::vector<int> pending_;  // per bucket: parameters not yet ready
  std::vector<bool> ready_;   // per parameter, this step
  std::vector<std::shared_ptr<comm::Work>> works_;
  std::vector<Tensor> staging_;  // per bucket, compressed wire buffers
  size_t next_launch_ = 0;
  bool synchronize_ = true;
  bool accumulate_ = false;
  bool measure_norms_ = false;
  bool active_ = false;
  ReducerStats last_;
  // ZeRO-2.
  std::vector<Tensor> slots_;     // kStagingSlots flat buffers, communication
  std::vector<Tensor> shards_;    // per bucket: this replica's reduced shard
  std::vector<bool> slot_taken_;  // per bucket, this pass
  std::vector<bool> staged_;      // per parameter, this pass
};

}  // namespace tandem::distribute
