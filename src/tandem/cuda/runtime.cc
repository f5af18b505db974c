#include "tandem/cuda/runtime.h"

#include <map>
#include <mutex>

#include "tandem/base/error.h"

namespace tandem::cuda {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  // Clears a sticky-free error so that the next call does not report it again.
  cudaGetLastError();
  TANDEM_THROW(Error, "CUDA error in ", what, ": ", cudaGetErrorName(status), " (",
               cudaGetErrorString(status), ")");
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver, or no device: not an error here
    return 0;
  }
  return count;
}

DeviceGuard::DeviceGuard(Device device) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device.index) check(cudaSetDevice(device.index), "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() {
  int current = 0;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
}

cudaStream_t stream(Device device) {
  if (device.kind != DeviceKind::cuda) {
    TANDEM_THROW(InvalidArgument, "no CUDA stream for ", device.to_string());
  }
  // Streams live as long as the process: a thread's work may still be queued
  // when it ends, and the driver reclaims them at exit.
  thread_local std::map<int, cudaStream_t> streams;
  auto it = streams.find(device.index);
  if (it != streams.end()) return it->second;
  if (device.index < 0 || device.index >= device_count()) {
    TANDEM_THROW(InvalidArgument, device.to_string(), " does not exist: this machine has ",
                 device_count(), " CUDA device(s)");
  }
  DeviceGuard guard(device);
  cudaStream_t created = nullptr;
  check(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking), "cudaStreamCreate");
  streams.emplace(device.index, created);
  return created;
}

void synchronize(Device device) {
  check(cudaStreamSynchronize(stream(device)), "a kernel or copy queued on this thread's stream");
}

void check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

unsigned int blocks_for(int64_t n, unsigned int threads) {
  const int64_t needed = (n + threads - 1) / threads;
  // Enough blocks to fill any current GPU several times over; more only
  // adds scheduling. Kernels stride by gridDim.x * blockDim.x.
  constexpr int64_t kMaxBlocks = 65536;
  return static_cast<unsigned int>(needed < 1 ? 1 : (needed > kMaxBlocks ? kMaxBlocks : needed));
}

}  // namespace tandem::cuda
