#pragma once
// The link between layers that need other replicas' data (synchronised batch
// norm) and the distribution strategy that knows the replicas. A strategy
// installs a CrossReplicaSum on each replica thread for the duration of a
// step; layers look it up with current_cross_replica_sum(). Defined here, not
// in the collectives layer, so that autograd and nn stay below it.

#include <cstdint>

#include "tandem/tensor/tensor.h"

namespace tandem {

class CrossReplicaSum {
 public:
  virtual ~CrossReplicaSum() = default;
  // Replaces `values` (f32, any shape) by its sum over all replicas. Every
  // replica calls it with the same shape, in the same order.
  virtual void sum(Tensor& values) = 0;
};

// The calling thread's cross-replica sum, or null outside a replicated step.
CrossReplicaSum* current_cross_replica_sum();

// Installs `sum` on the calling thread for its scope.
class CrossReplicaScope {
 public:
  explicit CrossReplicaScope(CrossReplicaSum* sum);
  ~CrossReplicaScope();
  CrossReplicaScope(const CrossReplicaScope&) = delete;
  CrossReplicaScope& operator=(const CrossReplicaScope&) = delete;

 private:
  CrossReplicaSum* previous_;
};

}  // namespace tandem
