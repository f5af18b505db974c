#pragma once
// What the kernel backends are: oneDNN and the instruction set it dispatches
// to, and, in a CUDA build, the GPUs and the CUDA libraries' versions.

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::kernels {

struct BackendInfo {
  std::string onednn_version;  // "2.6.3"
  std::string cpu_isa;         // oneDNN's effective ISA, e.g. "avx512_core_bf16"
  int max_threads = 0;         // OpenMP threads available to the calling thread
  // oneDNN has bf16 primitives on this CPU (AVX-512 and up); without them
  // bf16 operands are widened and computed in f32 (kernels/detail/onednn.h).
  bool bf16_primitives = false;

  bool cuda_built = false;  // this build has the CUDA backend
  struct Gpu {
    std::string name;
    int64_t memory_bytes = 0;
    int compute_major = 0, compute_minor = 0;
    int multiprocessors = 0;
  };
  std::vector<Gpu> gpus;  // empty without a driver or GPU
  // "13.0" etc.; empty when not built, the driver's "none" when absent.
  // (NCCL's version is comm's: comm::nccl_version().)
  std::string cuda_runtime_version, cuda_driver_version, cublas_version, cudnn_version;
};

BackendInfo backend_info();

}  // namespace tandem::kernels
