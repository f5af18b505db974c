#include "tandem/distribute/replica_context.h"

#include "tandem/base/parallel.h"
#include "tandem/base/random.h"
#include "tandem/tensor/allocator.h"

namespace tandem::distribute {
namespace {

thread_local const ReplicaContext* installed = nullptr;

// Sums over the replicas through the replica's communicator (synchronous).
class CommunicatorSum : public CrossReplicaSum {
 public:
  explicit CommunicatorSum(comm::Communicator* comm) : comm_(comm) {}
  void sum(Tensor& values) override {
    if (comm_) comm_->all_reduce(values, comm::ReduceOp::sum);
  }

 private:
  comm::Communicator* comm_;
};

}  // namespace

struct ReplicaScope::Saved {
  explicit Saved(const ReplicaContext& c)
      : device(c.device),
        threads(c.threads),
        category(MemoryCategory::activations),
        sum(c.communicator),
        cross_replica(&sum),
        previous(installed),
        generator(thread_generator()) {}
  DeviceScope device;
  NumThreadsScope threads;
  MemoryCategoryScope category;
  CommunicatorSum sum;
  CrossReplicaScope cross_replica;
  const ReplicaContext* previous;
  Generator generator;
};

const ReplicaContext* current_replica_context() {
  return installed;
}

ReplicaScope::ReplicaScope(const ReplicaContext& context)
    : saved_(std::make_unique<Saved>(context)) {
  installed = &context;
}

ReplicaScope::~ReplicaScope() {
  installed = saved_->previous;
  thread_generator() = saved_->generator;
}

void seed_replica_generator(uint64_t seed, int64_t step, const ReplicaContext& context) {
  const uint64_t stream =
      static_cast<uint64_t>(step) * static_cast<uint64_t>(context.num_replicas) +
      static_cast<uint64_t>(context.global_replica);
  thread_generator().set_state(mix_seed(seed ^ 0xD50Dull, stream), 0);
}

}  // namespace tandem::distribute
