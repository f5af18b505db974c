#include "tandem/autograd/cross_replica.h"

namespace tandem {
namespace {
thread_local CrossReplicaSum* current = nullptr;
}

CrossReplicaSum* current_cross_replica_sum() {
  return current;
}

CrossReplicaScope::CrossReplicaScope(CrossReplicaSum* sum) : previous_(current) {
  current = sum;
}

CrossReplicaScope::~CrossReplicaScope() {
  current = previous_;
}

}  // namespace tandem
