#include "tandem/kernels/cuda/kernels.h"

#include "tandem/kernels/cuda/libraries.h"
#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

// CUDA encodes versions as 1000 * major + 10 * minor.
std::string cuda_version(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

}  // namespace

void describe(kernels::BackendInfo& info) {
  info.cuda_built = true;
  int runtime = 0;
  int driver = 0;
  info.cuda_runtime_version =
      cudaRuntimeGetVersion(&runtime) == cudaSuccess ? cuda_version(runtime) : "unknown";
  info.cuda_driver_version =
      cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0 ? cuda_version(driver) : "none";
  cudaGetLastError();
  info.cublas_version = cublaslt_version();
  info.cudnn_version = cudnn_version();
  for (int i = 0; i < physical_device_count(); ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    info.gpus.push_back({.name = p.name,
                         .memory_bytes = static_cast<int64_t>(p.totalGlobalMem),
                         .compute_major = p.major,
                         .compute_minor = p.minor,
                         .multiprocessors = p.multiProcessorCount});
  }
}

}  // namespace tandem::cuda
