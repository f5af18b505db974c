// TANDEM_MAX_CPU_ISA caps the instruction set of tandem's own kernels as
// ONEDNN_MAX_CPU_ISA caps oneDNN's: "avx2" runs their portable loops on an
// AVX-512 CPU (to compare the two, or to test the loops a CPU without
// AVX-512 would run: CTest's kernels.portable_loops), "avx512_core" their
// AVX-512 kernels without AVX512-BF16's instructions or the AMX tiles (what
// Skylake-SP to Ice Lake run), "avx512" without the AMX tiles; "amx", or
// the variable unset, uses what the CPU has.
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <string_view>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/kernels/detail/amx.h"
#include "tandem/kernels/detail/avx512_lanes.h"

namespace tandem::kernels::detail {
namespace {

enum class IsaCap { avx2, avx512_core, avx512, amx };

IsaCap isa_cap() {
  const char* cap = std::getenv("TANDEM_MAX_CPU_ISA");
  if (cap == nullptr || std::string_view(cap) == "amx") return IsaCap::amx;
  if (std::string_view(cap) == "avx512") return IsaCap::avx512;
  if (std::string_view(cap) == "avx512_core") return IsaCap::avx512_core;
  if (std::string_view(cap) == "avx2") return IsaCap::avx2;
  TANDEM_THROW(InvalidArgument,
               "TANDEM_MAX_CPU_ISA must be avx2, avx512_core, avx512 or amx, got \"", cap, "\"");
}

// Linux hands a process the AMX tile registers' state only when asked
// (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, kernel 5.16+);
// oneDNN asks too, the grant is the process's.
bool os_grants_amx_tiles() {
  constexpr int kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

bool avx512_allowed() {
  return isa_cap() != IsaCap::avx2;
}

bool avx512_bf16_allowed() {
  return isa_cap() == IsaCap::avx512 || isa_cap() == IsaCap::amx;
}

const bool converts_bf16_natively = [] {
  try {
    return has_avx512_bf16();
  } catch (const Error&) {
    return false;
  }
}();

bool amx_allowed() {
  return isa_cap() == IsaCap::amx;
}

bool amx_bf16_usable() {
  return amx_allowed() && has_avx512() && cpu_info().has("amx_tile") &&
         cpu_info().has("amx_bf16") && os_grants_amx_tiles();
}

}  // namespace tandem::kernels::detail
