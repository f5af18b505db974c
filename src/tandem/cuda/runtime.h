#pragma once
// The CUDA runtime as the backend uses it: errors turned into tandem::Error,
// the calling thread's stream on each device (one per replica thread, as
// each replica runs on its own thread), and events to time device work.
// Only the CUDA backend's own files include this header: it pulls in the
// CUDA runtime's, which the rest of tandem never sees.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "tandem/tensor/device.h"

namespace tandem::cuda {

// Throws Error naming `what` and CUDA's message when status is not success.
void check(cudaError_t status, const char* what);

// Devices the driver shows this process; 0 when there is no driver or GPU.
int device_count();

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
void synchronize(Device device);

// Checks that the last launch was accepted (a bad configuration shows at
// once; faults inside the kernel show at the next synchronisation).
void check_launch(const char* kernel);

// Grid size for n elements at `threads` per block, capped where one thread
// then strides over several elements.
unsigned int blocks_for(int64_t n, unsigned int threads);

}  // namespace tandem::cuda
