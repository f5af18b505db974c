#include "tandem/cuda/info.h"

#include <cublasLt.h>
#include <cudnn.h>
#include <nccl.h>

#include "tandem/cuda/runtime.h"

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
  const size_t cublas = cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
  info.cublas_version = std::to_string(cublas / 10000) + "." + std::to_string(cublas / 100 % 100) +
                        "." + std::to_string(cublas % 100);
  const size_t cudnn = cudnnGetVersion();  // major * 10000 + minor * 100 + patch (cuDNN 9)
  info.cudnn_version = std::to_string(cudnn / 10000) + "." + std::to_string(cudnn / 100 % 100) +
                       "." + std::to_string(cudnn % 100);
  int nccl = 0;
  info.nccl_version = ncclGetVersion(&nccl) == ncclSuccess
                          ? std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) +
                                "." + std::to_string(nccl % 100)
                          : "unknown";
  for (int i = 0; i < device_count(); ++i) {
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
