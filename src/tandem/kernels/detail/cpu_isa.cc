// TANDEM_MAX_CPU_ISA caps the instruction set of tandem's own kernels as
// ONEDNN_MAX_CPU_ISA caps oneDNN's: "avx2" runs their portable loops on an
// AVX-512 CPU (to compare the two, or to test the loops a CPU without
// AVX-512 would run: CTest's kernels.portable_loops); "avx512", or the
// variable unset, uses what the CPU has.
#include <cstdlib>
#include <string_view>

#include "tandem/base/error.h"
#include "tandem/kernels/detail/avx512_lanes.h"

namespace tandem::kernels::detail {

bool avx512_allowed() {
  const char* cap = std::getenv("TANDEM_MAX_CPU_ISA");
  if (cap == nullptr || std::string_view(cap) == "avx512") return true;
  if (std::string_view(cap) == "avx2") return false;
  TANDEM_THROW(InvalidArgument, "TANDEM_MAX_CPU_ISA must be avx2 or avx512, got \"", cap, "\"");
}

}  // namespace tandem::kernels::detail
