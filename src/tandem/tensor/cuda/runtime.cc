#include "tandem/tensor/cuda/runtime.h"

#include <atomic>
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

namespace {
std::atomic<int> per_gpu{1};
}  // namespace

int physical_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver, or no device: not an error here
    return 0;
  }
  return count;
}

void set_devices_per_gpu(int count) {
  if (count < 1 || count > 64) {
    TANDEM_THROW(InvalidArgument, "virtual GPU devices per GPU must be 1 to 64, got ", count);
  }
  per_gpu.store(count);
}

int devices_per_gpu() {
  return per_gpu.load();
}

int device_count() {
  return physical_device_count() * devices_per_gpu();
}

int physical_index(Device device) {
  return device.index / devices_per_gpu();
}

DeviceGuard::DeviceGuard(Device device) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  const int gpu = physical_index(device);
  if (previous_ != gpu) check(cudaSetDevice(gpu), "cudaSetDevice");
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

void sync_stream(Device device) {
  check(cudaStreamSynchronize(stream(device)), "a kernel or copy queued on this thread's stream");
}

void sync_device(Device device) {
  DeviceGuard guard(device);
  check(cudaDeviceSynchronize(), "work queued on the GPU");
}

std::shared_ptr<void> record_event(Device device) {
  DeviceGuard guard(device);
  cudaEvent_t event = nullptr;
  check(cudaEventCreate(&event), "cudaEventCreate");
  std::shared_ptr<void> owner(event,
                              [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  check(cudaEventRecord(event, stream(device)), "cudaEventRecord");
  return owner;
}

double seconds_between_events(void* earlier, void* later) {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(later)), "waiting for a timing event");
  float ms = 0.0f;
  check(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(earlier), static_cast<cudaEvent_t>(later)),
      "cudaEventElapsedTime");
  return static_cast<double>(ms) * 1e-3;
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
