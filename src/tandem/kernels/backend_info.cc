#include "tandem/kernels/backend_info.h"

#include <dnnl.h>
#include <omp.h>

#include <string>

#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/onednn.h"

namespace tandem::kernels {
namespace {

std::string isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx512_mic:
      return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    default:
      return "isa#" + std::to_string(static_cast<int>(isa));
  }
}

}  // namespace

BackendInfo backend_info() {
  BackendInfo info;
  const dnnl_version_t* v = dnnl_version();
  info.onednn_version =
      std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  info.cpu_isa = isa_name(dnnl_get_effective_cpu_isa());
  info.max_threads = omp_get_max_threads();
  info.bf16_primitives = detail::onednn_runs_bf16();
  TANDEM_CUDA_ONLY(cuda::describe(info));
  return info;
}

}  // namespace tandem::kernels
