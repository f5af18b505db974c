#pragma once
// What the kernel backend (oneDNN) is and which instruction set it dispatches to.

#include <string>

namespace tandem::kernels {

struct BackendInfo {
  std::string onednn_version;  // "2.6.3"
  std::string cpu_isa;         // oneDNN's effective ISA, e.g. "avx512_core_bf16"
  int max_threads = 0;         // OpenMP threads available to the calling thread
  // oneDNN has bf16 primitives on this CPU (AVX-512 and up); without them
  // bf16 operands are widened and computed in f32 (kernels/detail/onednn.h).
  bool bf16_primitives = false;
};

BackendInfo backend_info();

}  // namespace tandem::kernels
