#include "tandem/comm/inprocess.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/base/error.h"
#include "tandem/comm/detail/reduce_kernels.h"
#include "tandem/comm/detail/spin_barrier.h"
#include "tandem/tensor/device_memory.h"

namespace tandem::comm {

struct InProcessGroup::State {
  struct alignas(64) Slot {
    Call call;  // signature only: no tensors
    const void* input = nullptr;
    void* output = nullptr;
    bool small = false;
    bool gpu = false;  // the buffers are GPU memory (device addresses)
  };

  State(int ranks, InProcessOptions o)
      : size(ranks),
        options(o),
        barrier(ranks),
        slots{std::vector<Slot>(static_cast<size_t>(ranks)),
              std::vector<Slot>(static_cast<size_t>(ranks))},
        staging_bytes(static_cast<size_t>((o.small_message_bytes + 63) / 64 * 64)) {
    for (auto& parity : staging) {
      parity = Tensor::empty(Shape{static_cast<int64_t>(staging_bytes) * ranks}, DType::u8,
                             cpu_device(), MemoryCategory::communication);
    }
  }

  void* staged(int parity, int rank) const {
    return static_cast<char*>(staging[parity].raw_data()) +
           staging_bytes * static_cast<size_t>(rank);
  }

  const int size;
  const InProcessOptions options;
  sync::SpinBarrier barrier;
  // Slots and staging are double-buffered by the parity of the call count: a
  // rank rewrites parity p two calls later, after a barrier that every rank
  // reaches only once done reading this call's slots.
  std::vector<Slot> slots[2];
  const size_t staging_bytes;
  Tensor staging[2];
  // Breaks the group (a timeout or an abort): the first reason wins.
  void break_group(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!broken.load()) reason = why;
      broken.store(true);
    }
    barrier.abort();
  }
  std::string broken_reason() const {
    std::lock_guard<std::mutex> lock(mutex);
    return reason;
  }
  // A broken call's buffers: peers that passed its first barrier may still
  // read or write them, so they live as long as the group.
  void quarantine(const Call& call) {
    std::lock_guard<std::mutex> lock(mutex);
    if (call.input.defined()) quarantined.push_back(call.input);
    if (call.output.defined()) quarantined.push_back(call.output);
  }

  std::atomic<bool> broken{false};
  mutable std::mutex mutex;
  std::string reason;
  std::vector<Tensor> quarantined;
};

namespace {

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessGroup::State> state, int rank)
      : Communicator(state->options.comm),
        state_(std::move(state)),
        rank_(rank),
        inputs_(static_cast<size_t>(state_->size)),
        outputs_(static_cast<size_t>(state_->size)) {}
  ~InProcessCommunicator() override { drain(); }

  void abort(const std::string& reason) override { state_->break_group(reason); }

  int rank() const override { return rank_; }
  int size() const override { return state_->size; }
  std::string backend() const override { return "inprocess"; }
  bool takes_gpu_buffers() const override { return true; }
  std::string_view all_reduce_algorithm(int64_t bytes) const override {
    // Staged: one barrier, each rank reduces every staged copy. Sliced: each
    // rank reduces its slice of every buffer and writes it to all, two barriers.
    return bytes <= state_->options.small_message_bytes ? "staged" : "sliced";
  }

 protected:
  void run(const Call& call) override;

 private:
  void wait_all(const Call& call);
  [[noreturn]] void refuse(const Call& call) const;
  void check_calls(const Call& call, int parity) const;
  void reduce_slice(const Call& call, int parity);

  std::shared_ptr<InProcessGroup::State> state_;
  int rank_;
  std::vector<const void*> inputs_;  // per-call scratch, one entry per rank
  std::vector<void*> outputs_;
  uint64_t calls_ = 0;  // collectives started on this rank: the same on every rank
};

void InProcessCommunicator::wait_all(const Call& call) {
  bool arrived = false;
  try {
    arrived = state_->barrier.arrive_and_wait(
        rank_, options().timeout, [&] { return call.describe() + " #" + std::to_string(calls_); });
  } catch (const Timeout& e) {
    state_->break_group(e.what());
    state_->quarantine(call);
    throw;
  }
  if (!arrived) {
    state_->quarantine(call);
    refuse(call);
  }
}

void InProcessCommunicator::refuse(const Call& call) const {
  TANDEM_THROW(PeerFailed, state_->broken_reason(), " (", call.describe(), " on rank ", rank_,
               " abandoned)");
}

void InProcessCommunicator::check_calls(const Call& call, int parity) const {
  const auto& slots = state_->slots[parity];
  for (int r = 0; r < size(); ++r) {
    if (!slots[r].call.error.empty()) {
      TANDEM_THROW(CommError, slots[r].call.error,
                   r == rank_ ? "" : tandem::detail::concat(" (seen on rank ", rank_, ")"));
    }
  }
  if (!options().verify_calls) return;
  for (int r = 0; r < size(); ++r) {
    if (!slots[r].call.matches(call)) {
      TANDEM_THROW(CommError, "collective mismatch: rank ", rank_, " called ", call.describe(),
                   " but rank ", r, " called ", slots[r].call.describe());
    }
  }
}

// GPU buffers: the call's device (ranks on virtual GPU devices of one GPU,
// or on GPUs that reach each other's memory).
Device buffer_device(const Call& call) {
  return call.input.defined() ? call.input.device() : call.output.device();
}

bool on_gpu(const Call& call) {
  return (call.input.defined() || call.output.defined()) &&
         buffer_device(call).kind != DeviceKind::cpu;
}

// memcpy, or a copy on the calling thread's stream between GPU buffers.
void copy(const Call& call, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (!on_gpu(call)) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const Device device = buffer_device(call);
  tandem::detail::device_copy(dst, device, src, device, bytes);
}

// reduce_range over host or GPU buffers.
void reduce(const Call& call, float scale, const void* const* inputs, int input_count,
            void* const* outputs, int output_count, int64_t begin, int64_t end) {
  if (on_gpu(call)) {
    kernels::reduce_range_on_device(buffer_device(call), call.dtype, call.op, scale, inputs,
                                    input_count, outputs, output_count, begin, end);
  } else {
    kernels::reduce_range(call.dtype, call.op, scale, inputs, input_count, outputs, output_count,
                          begin, end);
  }
}

void InProcessCommunicator::reduce_slice(const Call& call, int parity) {
  const int n = size();
  const auto& slots = state_->slots[parity];
  for (int r = 0; r < n; ++r) {
    inputs_[r] = slots[r].input;
    outputs_[r] = slots[r].output;
  }
  // Slices are whole multiples of 64 bytes (16 f32 or 32 bf16 elements), so
  // that in a buffer that starts on a cache line no two ranks write one.
  const auto align = static_cast<int64_t>(64 / dtype_size(call.dtype));
  const int64_t per_rank = ((call.count + n - 1) / n + align - 1) / align * align;
  const int64_t begin = std::min(call.count, per_rank * rank_);
  const int64_t end = std::min(call.count, per_rank * (rank_ + 1));
  const float scale = call.op == ReduceOp::mean ? 1.0f / static_cast<float>(n) : 1.0f;
  reduce(call, scale, inputs_.data(), n, outputs_.data(), n, begin, end);
}

void InProcessCommunicator::run(const Call& call) {
  if (state_->broken.load()) refuse(call);
  const int n = size();
  const int parity = static_cast<int>(calls_ & 1);
  auto& slot = state_->slots[parity][rank_];
  const size_t bytes = static_cast<size_t>(call.count) * dtype_size(call.dtype);
  slot.call.collective = call.collective;
  slot.call.dtype = call.dtype;
  slot.call.count = call.count;
  slot.call.op = call.op;
  slot.call.root = call.root;
  slot.call.error = call.error;
  slot.input = call.input.defined() ? call.input.device_data() : nullptr;
  slot.output = call.output.defined() ? call.output.device_data() : nullptr;
  slot.gpu = on_gpu(call);
  slot.small = !slot.gpu && call.collective == Collective::all_reduce && call.error.empty() &&
               static_cast<int64_t>(bytes) <= state_->options.small_message_bytes;
  if (slot.small && bytes > 0) std::memcpy(state_->staged(parity, rank_), slot.input, bytes);
  // GPU buffers: every kernel that writes them has run before a peer reads
  // them (this may be the progress thread, not the replica's, so the whole
  // GPU is waited for).
  if (slot.gpu) synchronize_all(buffer_device(call));
  wait_all(call);
  if (state_->options.whole_group) mark_all_ranks_arrived();
  ++calls_;
  check_calls(call, parity);
  for (int r = 0; r < n; ++r) {
    if (state_->slots[parity][r].gpu != slot.gpu) {
      TANDEM_THROW(CommError, "in-process collective: rank ", r, "'s buffers are ",
                   slot.gpu ? "host" : "GPU", " memory and rank ", rank_, "'s are ",
                   slot.gpu ? "GPU" : "host", " memory (every rank must pass the same kind)");
    }
  }
  if (state_->broken.load()) {
    // Broken since the barrier: the peers may not all be here to finish.
    state_->quarantine(call);
    refuse(call);
  }

  const auto& slots = state_->slots[parity];
  switch (call.collective) {
    case Collective::barrier:
      return;
    case Collective::all_reduce:
      if (slot.small) {
        for (int r = 0; r < n; ++r) inputs_[r] = state_->staged(parity, r);
        void* out = slot.output;
        const float scale = call.op == ReduceOp::mean ? 1.0f / static_cast<float>(n) : 1.0f;
        kernels::reduce_range(call.dtype, call.op, scale, inputs_.data(), n, &out, 1, 0,
                              call.count);
        return;
      }
      reduce_slice(call, parity);
      break;
    case Collective::reduce_scatter: {
      const int64_t segment = call.count / n;
      const size_t offset = static_cast<size_t>(segment * rank_) * dtype_size(call.dtype);
      for (int r = 0; r < n; ++r) inputs_[r] = static_cast<const char*>(slots[r].input) + offset;
      void* out = slot.output;
      const float scale = call.op == ReduceOp::mean ? 1.0f / static_cast<float>(n) : 1.0f;
      reduce(call, scale, inputs_.data(), n, &out, 1, 0, segment);
      break;
    }
    case Collective::all_gather:
      for (int r = 0; r < n; ++r) {
        copy(call, static_cast<char*>(slot.output) + bytes * r, slots[r].input, bytes);
      }
      break;
    case Collective::broadcast:
      if (rank_ != call.root) copy(call, slot.output, slots[call.root].input, bytes);
      break;
  }
  // This thread's kernels and copies on GPU buffers are done before the
  // peers go on (and may reuse their inputs).
  if (slot.gpu) synchronize(buffer_device(call));
  // Peers may still be reading this rank's input: hold it until all are done.
  wait_all(call);
}

}  // namespace

InProcessGroup::InProcessGroup(int size, InProcessOptions options) {
  if (size < 1 || size > 1024) {
    TANDEM_THROW(InvalidArgument, "in-process group size must be in 1..1024, got ", size);
  }
  if (options.small_message_bytes < 0) {
    TANDEM_THROW(InvalidArgument, "small_message_bytes must be >= 0, got ",
                 options.small_message_bytes);
  }
  state_ = std::make_shared<State>(size, options);
}

InProcessGroup::~InProcessGroup() = default;

int InProcessGroup::size() const {
  return state_->size;
}

std::unique_ptr<Communicator> InProcessGroup::communicator(int rank) {
  if (rank < 0 || rank >= state_->size) {
    TANDEM_THROW(InvalidArgument, "rank ", rank, " is outside the group of ", state_->size);
  }
  return std::make_unique<InProcessCommunicator>(state_, rank);
}

}  // namespace tandem::comm
