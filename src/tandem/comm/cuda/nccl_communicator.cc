#include "tandem/comm/cuda/nccl_communicator.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "tandem/base/error.h"
#include "tandem/comm/cuda/nccl_library.h"
#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

using comm::Call;
using comm::Collective;
using comm::ReduceOp;

void check_nccl(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) {
    TANDEM_THROW(CommError, what, ": ", nccl().error_string(result));
  }
}

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    default:
      TANDEM_THROW(CommError, "NCCL collectives take f32, bf16, f16 or i32, got ",
                   dtype_name(dtype));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::mean:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    default:
      return ncclMin;
  }
}

// What the ranks of one group share: whether a rank has given up, and why,
// so that the others stop waiting for it (contract point 5). Ranks in other
// processes learn of it only by their own timeout.
struct GroupState {
  std::mutex mutex;
  std::string broken_reason;
  std::atomic<bool> broken{false};

  void breaks(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!broken.exchange(true)) broken_reason = reason;
  }
  std::string reason() {
    std::lock_guard<std::mutex> lock(mutex);
    return broken_reason;
  }
};

class NcclCommunicator : public comm::Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, Device device,
                   std::shared_ptr<GroupState> group, const comm::CommOptions& options)
      : Communicator(options),
        comm_(comm),
        rank_(rank),
        size_(size),
        device_(device),
        group_(std::move(group)) {
    DeviceGuard guard(device_);
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate (NCCL)");
    scratch_ = Tensor::zeros(Shape{1}, DType::f32, device_);
  }

  ~NcclCommunicator() override {
    drain();
    DeviceGuard guard(device_);
    for (cudaEvent_t e : issued_) cudaEventDestroy(e);
    if (group_->broken) {
      abort_once();
    } else if (!aborted_.load()) {
      nccl().comm_destroy(comm_);
    }
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  bool takes_gpu_buffers() const override { return true; }
  std::string_view all_reduce_algorithm(int64_t) const override { return "ncclAllReduce"; }

  void abort(const std::string& reason) override {
    group_->breaks("rank " + std::to_string(rank_) + " aborted: " + reason);
  }

 protected:
  // The call's buffers were written by kernels the issuing thread queued on
  // its stream: the communication stream waits for them (an event, not the
  // host), so the collective overlaps the work queued after it.
  void on_issue(const Call&) override {
    DeviceGuard guard(device_);
    cudaEvent_t ready = nullptr;
    check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate (NCCL)");
    check(cudaEventRecord(ready, stream(device_)), "cudaEventRecord (NCCL)");
    std::lock_guard<std::mutex> lock(mutex_);
    issued_.push_back(ready);
  }

  void run(const Call& call) override {
    cudaEvent_t ready = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!issued_.empty()) {
        ready = issued_.front();
        issued_.pop_front();
      }
    }
    DeviceGuard guard(device_);
    if (ready != nullptr) {
      cudaStreamWaitEvent(stream_, ready, 0);
      cudaEventDestroy(ready);
    }
    if (group_->broken) {
      TANDEM_THROW(PeerFailed, group_->reason(), " (", call.describe(), " on rank ", rank_, ")");
    }
    // Every rank validates its arguments alike, so an invalid call fails on
    // every rank without a cross-rank check (NCCL has no place for one).
    if (!call.error.empty()) TANDEM_THROW(CommError, call.error, " (rank ", rank_, ")");
    if (!on_host(call)) {
      enqueue(call);
      wait(call);
      return;
    }
    // Host buffers (the engine's small agreement checks and timings) travel
    // through device copies: NCCL reads and writes device memory only.
    Call staged = call;
    staged.input = call.input.to(device_);
    const bool in_place = call.input.device_data() == call.output.device_data();
    staged.output =
        in_place ? staged.input : Tensor::empty(call.output.shape(), call.output.dtype(), device_);
    after_this_threads_work();
    enqueue(staged);
    wait(staged);
    Tensor output = call.output;  // shares the caller's storage
    output.copy_from(staged.output);
  }

 private:
  // Whether the call's buffers are in host memory; a call with one buffer
  // on each side is refused.
  bool on_host(const Call& call) const {
    if (!call.input.defined()) return false;
    const bool in = call.input.device().kind == DeviceKind::cpu;
    const bool out = call.output.device().kind == DeviceKind::cpu;
    if (in != out) {
      TANDEM_THROW(CommError, "NCCL: ", call.describe(), " with input on ",
                   call.input.device().to_string(), " and output on ",
                   call.output.device().to_string(), " (both must be on one side)");
    }
    if (!in && (call.input.device() != device_ || call.output.device() != device_)) {
      TANDEM_THROW(CommError, "NCCL rank ", rank_, " on ", device_.to_string(), ": ",
                   call.describe(), " has buffers on ", call.input.device().to_string());
    }
    return in;
  }

  // The communication stream waits for what this thread queued on its own
  // stream for the device (the staging copies).
  void after_this_threads_work() {
    cudaEvent_t copied = nullptr;
    check(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming), "cudaEventCreate (NCCL)");
    check(cudaEventRecord(copied, stream(device_)), "cudaEventRecord (NCCL)");
    cudaStreamWaitEvent(stream_, copied, 0);
    cudaEventDestroy(copied);
  }

  void enqueue(const Call& call) {
    const Nccl& n = nccl();
    if (call.collective == Collective::barrier) {
      check_nccl(n.all_reduce(scratch_.device_data(), scratch_.device_data(), 1, ncclFloat32,
                              ncclSum, comm_, stream_),
                 "ncclAllReduce (barrier)");
      return;
    }
    const ncclDataType_t dtype = nccl_dtype(call.dtype);
    const void* in = call.input.device_data();
    void* out = call.output.device_data();
    const auto count = static_cast<size_t>(call.count);
    switch (call.collective) {
      case Collective::all_reduce:
        check_nccl(n.all_reduce(in, out, count, dtype, nccl_op(call.op), comm_, stream_),
                   "ncclAllReduce");
        return;
      case Collective::reduce_scatter:
        check_nccl(n.reduce_scatter(in, out, count / static_cast<size_t>(size_), dtype,
                                    nccl_op(call.op), comm_, stream_),
                   "ncclReduceScatter");
        return;
      case Collective::all_gather:
        check_nccl(n.all_gather(in, out, count, dtype, comm_, stream_), "ncclAllGather");
        return;
      case Collective::broadcast:
        check_nccl(n.broadcast(in, out, count, dtype, call.root, comm_, stream_), "ncclBroadcast");
        return;
      default:
        TANDEM_THROW(CommError, "NCCL: unknown collective ", call.describe());
    }
  }

  // Until the collective has run on the device: the Work contract is host
  // completion. Polls, so that NCCL's asynchronous errors, a peer's abort
  // and the timeout end the wait (NCCL itself would wait forever).
  void wait(const Call& call) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const cudaError_t state = cudaStreamQuery(stream_);
      if (state == cudaSuccess) return;
      if (state != cudaErrorNotReady) check(state, "NCCL collective");
      cudaGetLastError();  // "not ready" must not linger as the next launch's error
      ncclResult_t async = ncclSuccess;
      nccl().comm_get_async_error(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        group_->breaks(std::string("NCCL error on rank ") + std::to_string(rank_) + ": " +
                       nccl().error_string(async));
      }
      if (group_->broken) {
        abort_once();
        TANDEM_THROW(PeerFailed, group_->reason(), " (", call.describe(), " on rank ", rank_, ")");
      }
      if (std::chrono::steady_clock::now() - start > options().timeout) {
        group_->breaks(call.describe() + " timed out on rank " + std::to_string(rank_));
        abort_once();
        TANDEM_THROW(Timeout, call.describe(), " on NCCL rank ", rank_, " did not finish within ",
                     options().timeout.count(), " ms");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  // ncclCommAbort frees the communicator: a second call (a failed wait,
  // then the destructor) would use freed memory.
  void abort_once() {
    if (!aborted_.exchange(true)) nccl().comm_abort(comm_);
  }

  ncclComm_t comm_;
  std::atomic<bool> aborted_{false};
  int rank_, size_;
  Device device_;
  std::shared_ptr<GroupState> group_;
  cudaStream_t stream_ = nullptr;
  Tensor scratch_;  // the barrier's one element
  std::mutex mutex_;
  std::deque<cudaEvent_t> issued_;  // one per call issued and not yet run
};

}  // namespace

std::vector<std::unique_ptr<comm::Communicator>> make_nccl_communicators(
    const std::vector<Device>& devices, const comm::CommOptions& options) {
  if (devices.empty()) TANDEM_THROW(InvalidArgument, "NCCL group: no devices");
  std::vector<int> gpus;
  for (const Device& d : devices) {
    if (d.kind != DeviceKind::cuda) {
      TANDEM_THROW(InvalidArgument, "NCCL group: ", d.to_string(), " is not a GPU");
    }
    const int gpu = physical_index(d);
    for (int g : gpus) {
      if (g == gpu) {
        TANDEM_THROW(InvalidArgument, "NCCL group: two ranks on GPU ", gpu,
                     " (NCCL needs one GPU per rank; virtual GPU devices use the in-process "
                     "collectives)");
      }
    }
    gpus.push_back(gpu);
  }
  std::vector<ncclComm_t> comms(devices.size());
  check_nccl(nccl().comm_init_all(comms.data(), static_cast<int>(gpus.size()), gpus.data()),
             "ncclCommInitAll");
  auto group = std::make_shared<GroupState>();
  std::vector<std::unique_ptr<comm::Communicator>> out;
  const int size = static_cast<int>(devices.size());
  for (int r = 0; r < size; ++r) {
    out.push_back(std::make_unique<NcclCommunicator>(
        comms[static_cast<size_t>(r)], r, size, devices[static_cast<size_t>(r)], group, options));
  }
  return out;
}

std::unique_ptr<comm::Communicator> make_nccl_communicator(comm::Communicator& bootstrap,
                                                           Device device,
                                                           const comm::CommOptions& options) {
  if (device.kind != DeviceKind::cuda) {
    TANDEM_THROW(InvalidArgument, "NCCL: ", device.to_string(), " is not a GPU");
  }
  // The id's bytes travel as i32 elements (collectives take no bytes).
  static_assert(sizeof(ncclUniqueId) % sizeof(int32_t) == 0);
  Tensor id_buffer = Tensor::zeros(
      Shape{static_cast<int64_t>(sizeof(ncclUniqueId) / sizeof(int32_t))}, DType::i32);
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) {
    check_nccl(nccl().get_unique_id(&id), "ncclGetUniqueId");
    std::memcpy(id_buffer.raw_data(), &id, sizeof(id));
  }
  bootstrap.broadcast(id_buffer, 0);
  std::memcpy(&id, id_buffer.raw_data(), sizeof(id));
  DeviceGuard guard(device);
  ncclComm_t comm = nullptr;
  check_nccl(nccl().comm_init_rank(&comm, bootstrap.size(), id, bootstrap.rank()),
             "ncclCommInitRank");
  return std::make_unique<NcclCommunicator>(comm, bootstrap.rank(), bootstrap.size(), device,
                                            std::make_shared<GroupState>(), options);
}

}  // namespace tandem::cuda
