#include "tandem/comm/detail/gpu_backend.h"

#include <atomic>

#include "tandem/base/error.h"

namespace tandem::comm::detail {
namespace {

std::atomic<GpuBackend*>& registered() {
  static std::atomic<GpuBackend*> backend{nullptr};
  return backend;
}

}  // namespace

GpuBackend* gpu_backend() {
  return registered().load(std::memory_order_acquire);
}

GpuBackend& require_gpu_backend(const char* what) {
  if (GpuBackend* backend = gpu_backend()) return *backend;
  TANDEM_THROW(NotImplemented, what,
               ": this build of tandem has no CUDA backend (TANDEM_WITH_CUDA)");
}

void register_gpu_backend(GpuBackend& backend) {
  GpuBackend* expected = nullptr;
  if (!registered().compare_exchange_strong(expected, &backend)) {
    TANDEM_THROW(InvalidArgument, "register_gpu_backend: a second GPU back end for comm");
  }
}

}  // namespace tandem::comm::detail
