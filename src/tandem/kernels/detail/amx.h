#pragma once
// Private: whether tandem's own kernels may use the AMX tiles (bf16 dot
// products into 16 x 16 f32 tiles): the CPU has them, TANDEM_MAX_CPU_ISA
// allows them (cpu_isa.cc) and the OS granted this process their state.

namespace tandem::kernels::detail {

// Whether TANDEM_MAX_CPU_ISA lets tandem's kernels use AMX.
bool amx_allowed();
// Asks once (the OS grant included); false where any part is missing.
bool amx_bf16_usable();
inline bool has_amx_bf16() {
  static const bool yes = amx_bf16_usable();
  return yes;
}

}  // namespace tandem::kernels::detail
