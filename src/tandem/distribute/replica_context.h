#pragma once
// ReplicaContext: everything a replica runs under, installed on its thread as
// one unit by a ReplicaScope and restored as one unit when the scope ends.
// It is the only place this per-thread state is set for a replica:
//   - the device its tensors are allocated on (DeviceScope),
//   - the intra-op thread count of its OpenMP team (NumThreadsScope),
//   - the memory category of new tensors (activations),
//   - the cross-replica sum that synchronised layers use (CrossReplicaScope),
//   - the thread's random generator (saved, then restored; the engine reseeds
//     it for each step from (seed, step, replica)),
//   - current_replica_context() itself (tf.distribute.get_replica_context()).

#include <cstdint>
#include <memory>

#include "tandem/autograd/cross_replica.h"
#include "tandem/comm/communicator.h"
#include "tandem/tensor/device.h"

namespace tandem::distribute {

struct ReplicaContext {
  int local_replica = 0;   // index among this process's replicas
  int global_replica = 0;  // index among every process's replicas
  int num_replicas = 1;    // global replica count
  Device device;
  int threads = 1;                             // intra-op threads
  comm::Communicator* communicator = nullptr;  // null when there is one replica
};

// The context installed on the calling thread, or null outside a replica.
const ReplicaContext* current_replica_context();

// Installs a context on the calling thread for the scope's lifetime. The
// context must outlive the scope. Not copyable; scopes nest.
class ReplicaScope {
 public:
  explicit ReplicaScope(const ReplicaContext& context);
  ~ReplicaScope();
  ReplicaScope(const ReplicaScope&) = delete;
  ReplicaScope& operator=(const ReplicaScope&) = delete;

 private:
  struct Saved;
  std::unique_ptr<Saved> saved_;
};

// Reseeds the calling thread's generator for one step of one replica: a pure
// function of (seed, step, global replica), so dropout masks do not depend on
// thread timing and a resumed run draws what an uninterrupted one drew.
void seed_replica_generator(uint64_t seed, int64_t step, const ReplicaContext& context);

}  // namespace tandem::distribute
