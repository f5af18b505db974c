#pragma once
// The CUDA runtime as the backend uses it: errors turned into tandem::Error,
// the calling thread's stream on each device (one per replica thread, as
// each replica runs on its own thread), and events to time device work.
// Only the CUDA backend's own files include this header: it pulls in the
// CUDA runtime's, which the rest of tandem never sees.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "tandem/tensor/device.h"

namespace tandem::cuda {

// Throws Error naming `what` and CUDA's message when status is not success.
void check(cudaError_t status, const char* what);

// GPUs the driver shows this process; 0 when there is no driver or GPU.
int physical_device_count();
// Virtual GPU devices (TensorFlow's logical devices): each GPU is split into
// this many cuda:N devices, GPU g holding cuda:(g*k) .. cuda:(g*k+k-1), each
// with its own allocator and streams. 1 (the default) is one device per GPU.
void set_devices_per_gpu(int count);
int devices_per_gpu();
// The cuda:N devices: physical GPUs x devices per GPU.
int device_count();
// The GPU (CUDA ordinal) a cuda:N device lives on.
int physical_index(Device device);

// Makes `device` current on this thread for the scope (cudaSetDevice), and
// restores the previous one after.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// This thread's stream on `device`, created on first use (non-blocking: it
// never waits for the legacy default stream). Kernels, copies and library
// calls a thread issues go to it, so each replica thread's work is ordered
// without host synchronisation and replicas overlap one another.
cudaStream_t stream(Device device);

// Waits until everything this thread queued on `device` has run, and turns
// an asynchronous kernel error into an Error.
void sync_stream(Device device);

// Waits until every thread's work on the device's GPU has run: a fence for
// buffers another thread's stream wrote (the in-process collectives).
void sync_device(Device device);

// An event (timing enabled) recorded on the calling thread's stream for
// `device`, destroyed with its last owner (tensor/device_clock.h).
std::shared_ptr<void> record_event(Device device);
// Milliseconds between two such events as seconds; waits for `later`.
double seconds_between_events(void* earlier, void* later);

// Checks that the last launch was accepted (a bad configuration shows at
// once; faults inside the kernel show at the next synchronisation).
void check_launch(const char* kernel);

// Grid size for n elements at `threads` per block, capped where one thread
// then strides over several elements.
unsigned int blocks_for(int64_t n, unsigned int threads);

}  // namespace tandem::cuda
