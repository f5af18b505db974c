#include "tandem/comm/hierarchical.h"

#include <cstring>

#include "tandem/base/error.h"
#include "tandem/comm/detail/reduce_kernels.h"
#include "tandem/comm/launch.h"

namespace tandem::comm {

struct HierarchicalGroup::State {
  int local_size = 1;
  int process_rank = 0;
  int process_count = 1;
  CommOptions options;
  std::unique_ptr<InProcessGroup> local;
  std::shared_ptr<Communicator> leaders;  // used by local rank 0 only
};

namespace {

// How much longer the local ranks wait than their leader (see the group's
// constructor).
constexpr std::chrono::seconds kLeaderReportGrace{5};

class HierarchicalCommunicator : public Communicator {
 public:
  HierarchicalCommunicator(std::shared_ptr<HierarchicalGroup::State> state, int local_rank)
      : Communicator(state->options),
        state_(std::move(state)),
        local_rank_(local_rank),
        local_(state_->local->communicator(local_rank)) {}
  ~HierarchicalCommunicator() override { drain(); }

  // Both levels break: the process's replicas and, through the leaders'
  // communicator, every other process.
  void abort(const std::string& reason) override {
    local_->abort(reason);
    state_->leaders->abort(reason);
  }

  int rank() const override { return state_->process_rank * state_->local_size + local_rank_; }
  int size() const override { return state_->process_count * state_->local_size; }
  std::string backend() const override { return "hierarchical"; }
  std::string_view all_reduce_algorithm(int64_t) const override {
    return state_->leaders->backend() == "gloo" ? "local+gloo ring+broadcast"
                                                : "local+MPI_Allreduce+broadcast";
  }

 protected:
  void run(const Call& call) override;

 private:
  bool leader() const { return local_rank_ == 0; }
  void run_levels(const Call& call);
  void all_reduce(const Tensor& buffer, ReduceOp op);

  std::shared_ptr<HierarchicalGroup::State> state_;
  int local_rank_;
  std::unique_ptr<Communicator> local_;
};

void HierarchicalCommunicator::all_reduce(const Tensor& buffer, ReduceOp op) {
  const ReduceOp partial = op == ReduceOp::mean ? ReduceOp::sum : op;
  local_->all_reduce(buffer, partial);
  // The leaders' call check marks when every process has arrived; the
  // other local ranks keep the time they picked the call up.
  if (leader()) state_->leaders->all_reduce(buffer, partial);
  local_->broadcast(buffer, 0);
  if (op == ReduceOp::mean) {
    kernels::scale_in_place(buffer.dtype(), buffer.raw_data(), buffer.numel(),
                            1.0f / static_cast<float>(size()));
  }
}

void HierarchicalCommunicator::run(const Call& call) {
  // Any failure breaks both levels, so that no rank of any process waits for
  // one that gave up (an invalid argument here fails on every rank).
  try {
    if (!call.error.empty()) TANDEM_THROW(CommError, call.error);
    run_levels(call);
  } catch (const PeerFailed& e) {
    local_->abort(e.what());  // the reason already names the failing rank
    throw;
  } catch (const std::exception& e) {
    abort(e.what());
    throw;
  }
}

void HierarchicalCommunicator::run_levels(const Call& call) {
  const int local_size = state_->local_size;
  switch (call.collective) {
    case Collective::barrier:
      local_->barrier();
      if (leader()) state_->leaders->barrier();
      local_->barrier();
      return;
    case Collective::all_reduce:
      if (call.input.raw_data() != call.output.raw_data()) {
        std::memcpy(call.output.raw_data(), call.input.raw_data(), call.input.nbytes());
      }
      all_reduce(call.output, call.op);
      return;
    case Collective::reduce_scatter: {
      // Reduce within the process, reduce-scatter between the leaders (a
      // process's ranks own contiguous segments, so its block is one), and
      // give each local rank its segment of the block: between processes
      // (P - 1) / P of the buffer, half of what an all-reduce moves.
      const ReduceOp partial = call.op == ReduceOp::mean ? ReduceOp::sum : call.op;
      const Tensor whole =
          call.input.reshape(Shape{call.input.numel()}).clone(MemoryCategory::communication);
      local_->all_reduce(whole, partial);
      const int64_t segment = call.output.numel();
      const Tensor block = Tensor::empty(Shape{segment * local_size}, whole.dtype(), whole.device(),
                                         MemoryCategory::communication);
      if (leader()) state_->leaders->reduce_scatter(whole, block, partial);
      local_->broadcast(block, 0);
      Tensor out = call.output;
      out.copy_from(block.slice(segment * local_rank_, segment * (local_rank_ + 1))
                        .reshape(call.output.shape()));
      if (call.op == ReduceOp::mean) {
        kernels::scale_in_place(out.dtype(), out.raw_data(), out.numel(),
                                1.0f / static_cast<float>(size()));
      }
      return;
    }
    case Collective::all_gather: {
      const int64_t n = call.count;
      const Tensor flat = call.output.reshape(Shape{call.output.numel()});
      const int64_t block = n * local_size;
      const Tensor mine =
          flat.slice(block * state_->process_rank, block * (state_->process_rank + 1));
      local_->all_gather(call.input, mine);
      if (leader()) {
        // Each leader's block is already in place; gather the others around it.
        const Tensor gathered =
            Tensor::empty(flat.shape(), flat.dtype(), flat.device(), MemoryCategory::communication);
        state_->leaders->all_gather(mine, gathered);
        std::memcpy(flat.raw_data(), gathered.raw_data(), flat.nbytes());
      }
      local_->broadcast(flat, 0);
      return;
    }
    case Collective::broadcast: {
      const int root_process = call.root / local_size;
      const int root_local = call.root % local_size;
      if (state_->process_rank == root_process && root_local != 0)
        local_->broadcast(call.output, root_local);
      if (leader()) state_->leaders->broadcast(call.output, root_process);
      local_->broadcast(call.output, 0);
      return;
    }
  }
}

}  // namespace

HierarchicalGroup::HierarchicalGroup(int local_size, CommOptions options)
    : HierarchicalGroup(local_size, nullptr, options) {}

HierarchicalGroup::HierarchicalGroup(int local_size, std::shared_ptr<Communicator> processes,
                                     CommOptions options)
    : state_(std::make_shared<State>()) {
  if (local_size < 1)
    TANDEM_THROW(InvalidArgument, "local size must be at least 1, got ", local_size);
  state_->local_size = local_size;
  state_->options = options;
  // The local ranks wait on their leader's call between processes: they give
  // its stall report (up to 3 s asking the other processes which call each
  // waits in) time to name the process that hangs before their own wait
  // times out with a reason that names only local ranks.
  CommOptions local = options;
  local.timeout += kLeaderReportGrace;
  state_->local = std::make_unique<InProcessGroup>(
      local_size, InProcessOptions{.comm = local, .whole_group = false});
  state_->leaders = processes ? std::move(processes) : make_process_communicator(options);
  state_->process_rank = state_->leaders->rank();
  state_->process_count = state_->leaders->size();
  // Every process must have the same number of local ranks.
  Tensor sizes = Tensor::full(Shape{2}, 0.0f, DType::i32);
  sizes.data<int32_t>()[0] = local_size;
  sizes.data<int32_t>()[1] = -local_size;
  state_->leaders->all_reduce(sizes, ReduceOp::max);
  if (sizes.data<int32_t>()[0] != -sizes.data<int32_t>()[1]) {
    TANDEM_THROW(CommError, "processes disagree on the number of local devices (between ",
                 -sizes.data<int32_t>()[1], " and ", sizes.data<int32_t>()[0], ")");
  }
}

HierarchicalGroup::~HierarchicalGroup() = default;

int HierarchicalGroup::local_size() const {
  return state_->local_size;
}
int HierarchicalGroup::process_rank() const {
  return state_->process_rank;
}
int HierarchicalGroup::process_count() const {
  return state_->process_count;
}

std::unique_ptr<Communicator> HierarchicalGroup::communicator(int local_rank) {
  if (local_rank < 0 || local_rank >= state_->local_size) {
    TANDEM_THROW(InvalidArgument, "local rank ", local_rank, " is outside 0..",
                 state_->local_size - 1);
  }
  return std::make_unique<HierarchicalCommunicator>(state_, local_rank);
}

}  // namespace tandem::comm
