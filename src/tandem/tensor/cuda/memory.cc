#include "tandem/tensor/cuda/memory.h"

#include <mutex>
#include <unordered_map>
#include <vector>

#include "tandem/base/error.h"
#include "tandem/tensor/cuda/host_staging.h"
#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

// The event each cached block was retired with, and a pool of spare events.
struct Fences {
  std::mutex mutex;
  std::unordered_map<void*, cudaEvent_t> pending;
  std::vector<cudaEvent_t> spare;
};

Fences& fences() {
  static auto* f = new Fences();  // never destroyed: blocks may outlive main()
  return *f;
}

cudaEvent_t take_event() {
  {
    Fences& f = fences();
    std::lock_guard<std::mutex> lock(f.mutex);
    if (!f.spare.empty()) {
      cudaEvent_t e = f.spare.back();
      f.spare.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  return e;
}

cudaEvent_t forget_fence(void* block) {
  Fences& f = fences();
  std::lock_guard<std::mutex> lock(f.mutex);
  auto it = f.pending.find(block);
  if (it == f.pending.end()) return nullptr;
  cudaEvent_t e = it->second;
  f.pending.erase(it);
  return e;
}

void spare_event(cudaEvent_t e) {
  Fences& f = fences();
  std::lock_guard<std::mutex> lock(f.mutex);
  f.spare.push_back(e);
}

}  // namespace

void* allocate(Device device, size_t bytes) {
  const int count = device_count();
  if (device.index < 0 || device.index >= count) {
    TANDEM_THROW(InvalidArgument, device.to_string(), " does not exist: this machine has ", count,
                 " CUDA device(s)");
  }
  DeviceGuard guard(device);
  void* block = nullptr;
  const cudaError_t status = cudaMalloc(&block, bytes == 0 ? 1 : bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  check(status, "cudaMalloc");
  return block;
}

void release(Device device, void* block) {
  if (block == nullptr) return;
  DeviceGuard guard(device);
  // cudaFree "may" synchronise, the runtime says, not "will": work another
  // thread queued on the block must have run before it goes back to CUDA
  // (the allocator frees its cache to retry a failed allocation).
  if (cudaEvent_t e = forget_fence(block)) {
    check(cudaEventSynchronize(e), "work queued on a freed block");
    spare_event(e);
  }
  check(cudaFree(block), "cudaFree");
}

void retire(Device device, void* block) {
  DeviceGuard guard(device);
  cudaEvent_t e = take_event();
  check(cudaEventRecord(e, stream(device)), "cudaEventRecord");
  Fences& f = fences();
  std::lock_guard<std::mutex> lock(f.mutex);
  f.pending[block] = e;
}

void reuse(Device device, void* block) {
  cudaEvent_t e = forget_fence(block);
  if (e == nullptr) return;
  DeviceGuard guard(device);
  check(cudaStreamWaitEvent(stream(device), e, 0), "cudaStreamWaitEvent");
  spare_event(e);
}

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  const bool dst_gpu = dst_device.kind == DeviceKind::cuda;
  const bool src_gpu = src_device.kind == DeviceKind::cuda;
  if (dst_gpu && src_gpu && dst_device.index != src_device.index) {
    // The source's queued work must finish first: it is on another stream.
    sync_stream(src_device);
    DeviceGuard guard(dst_device);
    check(cudaMemcpyPeerAsync(dst, physical_index(dst_device), src, physical_index(src_device),
                              bytes, stream(dst_device)),
          "cudaMemcpyPeerAsync");
    return;
  }
  if (dst_gpu && !src_gpu && copy_to_device_staged(dst, dst_device, src, bytes)) return;
  const Device gpu = dst_gpu ? dst_device : src_device;
  DeviceGuard guard(gpu);
  // From pageable host memory the copy is staged before this call returns
  // (waiting, for large copies, until the stream has reached it), so the
  // caller may free or change src at once.
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream(gpu)), "cudaMemcpyAsync");
  if (!dst_gpu) sync_stream(gpu);
}

void zero(void* dst, Device device, size_t bytes) {
  if (bytes == 0) return;
  DeviceGuard guard(device);
  check(cudaMemsetAsync(dst, 0, bytes, stream(device)), "cudaMemsetAsync");
}

}  // namespace tandem::cuda
