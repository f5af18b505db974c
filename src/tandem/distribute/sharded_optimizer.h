#pragma once
// ShardedOptimizer: ZeRO's update (stages 1 and 2) for one replica. The
// replica's parameters move into flat buffers laid out like its Reducer's
// buckets (padded to a multiple of the replica count N), and replica r owns
// shard r of every bucket: an f32 variable viewing its slice of the
// parameters, whose gradient is the Reducer's shard_gradient(b). The
// optimizer is built over those shards, so its state is 1/N of the
// replicated optimizer's. One update, on every replica at once:
//  1. Unscale and check this shard's gradients (with loss scaling); the
//     replicas agree on the outcome, so a non-finite value in any shard
//     skips the update everywhere.
//  2. Clip: the global norm from every shard's sum of squares, exchanged
//     bit for bit and added in rank order (the same double everywhere).
//  3. The optimizer updates this shard in place.
//  4. Each bucket's shards are all-gathered into the flat parameter
//     buffers: every replica holds the whole updated model again.
// State is saved and loaded under the replicated optimizer's names
// ("<parameter index>.<slot>", "updates"), gathered from the shards, so a
// ZeRO checkpoint loads without ZeRO and into any replica count, and back.

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/comm/bucketer.h"
#include "tandem/comm/communicator.h"
#include "tandem/distribute/engine_state.h"
#include "tandem/distribute/reducer.h"
#include "tandem/optim/optimizer.h"
#include "tandem/precision/loss_scaler.h"

namespace tandem::distribute {

class ShardedOptimizer {
 public:
  // parameters: the replica's parameters in model order (their values move
  // into the flat buffers); reducer: the replica's Reducer over the same
  // parameters with zero_stage 1 or 2. Throws what make_optimizer throws.
  ShardedOptimizer(std::vector<Variable> parameters, const Reducer& reducer,
                   comm::Communicator& comm, const optim::OptimizerConfig& config);

  struct Outcome {
    bool finite = true;          // false: the update was skipped
    double gradient_norm = 0.0;  // before clipping (clip_norm > 0 only)
  };
  // Steps 1-4 after the Reducer's finish(). scaler may be null (no loss
  // scaling; it is updated with the agreed outcome); clip_norm 0: no
  // clipping. Collective over the replicas.
  Outcome update(precision::LossScaler* scaler, double clip_norm);

  // The optimizer over this replica's shards.
  optim::Optimizer& optimizer() { return *optimizer_; }

  // The whole optimizer state under the replicated optimizer's names,
  // gathered from every shard (collective: every replica calls it), in
  // pieces of kGatherPiece elements per rank. Only a replica that keeps it
  // holds the whole state; the others hold one piece per rank at a time and
  // return nothing.
  // piece: elements per rank per all-gather (a test shrinks it to reach the
  // multi-piece path on small models).
  static constexpr int64_t kGatherPiece = int64_t{1} << 18;  // 1 MiB of f32
  std::vector<std::pair<std::string, Tensor>> gather_state(bool keep, int64_t piece = kGatherPiece);
  // The same, one bucket's slot at a time: `keep` receives each gathered
  // tensor (those of one bucket and slot, then the next; "updates" last) in
  // the order of state_layout(), and only those of one bucket's slot exist
  // at once. Collective like gather_state.
  using StateSink = std::function<void(const std::string& name, const Tensor& tensor)>;
  void gather_state(const StateSink& keep, int64_t piece = kGatherPiece);
  // The names, shapes and dtypes gather_state gives, in its order.
  std::vector<TensorLayout> state_layout() const;
  // Takes this replica's shard of a whole state (names as gather_state's,
  // under `prefix`). IoError for a missing or mis-shaped tensor;
  // InvalidArgument when parameters of one bucket were updated different
  // numbers of times (a shard keeps one count).
  void load_state(const EngineState& state, const std::string& prefix);
  // load_state's checks of every parameter's state (not only this shard's),
  // changing nothing: every replica and process refuses a bad state alike.
  void check_state(const EngineState& state, const std::string& prefix) const;

 private:
  int64_t shard_elements(size_t bucket) const;
  // The loaded "updates" (one count per parameter), checked.
  Tensor update_counts(const EngineState& state, const std::string& prefix) const;

  std::vector<Variable> parameters_;
  comm::Communicator& comm_;
  std::unique_ptr<comm::Bucketer> flat_;  // the parameters' values, bucket by bucket
  std::vector<Variable> shards_;          // one per bucket: this replica's slice
  std::unique_ptr<optim::Optimizer> optimizer_;
  Tensor gather_input_;  // the largest shard, communication
};

}  // namespace tandem::distribute
