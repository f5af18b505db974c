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
};

class Reducer {
 public:
  // parameters: the replica's parameters in model order (f32). Installs
  // gradient buffers (bucket views) and hooks on them.
  Reducer(std::vector<Variable> parameters, comm::Communicator& comm, ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  void prepare(bool synchronize = true);
  void finish();

  size_t bucket_count() const { return bucketer_->bucket_count(); }
  const ReducerStats& last_step() const { return last_; }

 private:
  std::chrono::milliseconds backstop_timeout() const;
  void on_ready(size_t parameter);
  void launch_ready_buckets();
  void launch(size_t bucket);

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
  bool active_ = false;
  ReducerStats last_;
};

}  // namespace tandem::distribute
