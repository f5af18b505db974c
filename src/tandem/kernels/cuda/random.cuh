#pragma once
// The counter-based generator of base/random.cc on the device: the same
// Philox4x32-10, so random_bits_at(seed, index) gives the same bits here as
// on the host and a dropout mask does not depend on the device.

#include <cstdint>

namespace tandem::cuda {

__device__ __forceinline__ uint32_t random_bits_at(uint64_t seed, uint64_t index) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  const uint64_t counter = index >> 2;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = __umulhi(kMul0, c0), lo0 = kMul0 * c0;
    const uint32_t hi1 = __umulhi(kMul1, c2), lo1 = kMul1 * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0;
    const uint32_t n2 = hi0 ^ c3 ^ k1;
    c1 = lo1;
    c3 = lo0;
    c0 = n0;
    c2 = n2;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  switch (index & 3) {
    case 0:
      return c0;
    case 1:
      return c1;
    case 2:
      return c2;
    default:
      return c3;
  }
}

}  // namespace tandem::cuda
