#pragma once
// Private: what tandem's AMX kernels share: the tiles' configuration (all 8
// tiles 16 rows of 64 bytes: an f32 16 x 16, or a bf16 16 x 32, or 16
// pairs of rows of 16 bf16 pairs) and the moves that put bf16 operands in
// the layouts the tile products take: C[m][n] += sum over k of
// A[m][2k + i] B[k][2n + i], i = 0, 1. Only for functions compiled with
// TANDEM_AMX. The tile instructions run only where has_amx_bf16() (amx.h);
// the layout moves are AVX-512 (BW) code and also serve AVX512-BF16's dot
// products, which take the same pairs (bf16_engine.h).

#include <immintrin.h>

#include <array>
#include <cstdint>

#include "tandem/kernels/detail/avx512_lanes.h"

#define TANDEM_AMX \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))

namespace tandem::kernels::detail {

// The word order that pairs a's and b's bf16 (_mm512_permutex2var_epi16:
// 0-31 from a, 32-63 from b): a0 b0 a1 b1 ...; entries 32-63 continue with
// the second halves.
alignas(64) inline constexpr std::array<uint16_t, 64> kPairOrder = [] {
  std::array<uint16_t, 64> order{};
  for (uint16_t i = 0; i < 64; ++i) order[i] = static_cast<uint16_t>(i % 2 ? 32 + i / 2 : i / 2);
  return order;
}();

TANDEM_AMX inline __m256i load_half(const uint16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// 16 bf16 of a and 16 of b as 16 (a, b) pairs: a0 b0 a1 b1 ...
TANDEM_AMX inline __m512i interleave(__m256i a, __m256i b) {
  return _mm512_permutex2var_epi16(_mm512_castsi256_si512(a), _mm512_load_si512(kPairOrder.data()),
                                   _mm512_castsi256_si512(b));
}

// 16 bf16 from p, or zeros where p is null.
TANDEM_AMX inline __m256i load_or_zero(const uint16_t* p) {
  return p == nullptr ? _mm256_setzero_si256() : load_half(p);
}

// n (a multiple of 16) bf16 of a and of b (null: zeros) as n (a, b) pairs
// into out (2 n), 32 pairs per pair of stores.
TANDEM_AMX inline void interleave_run(const uint16_t* a, const uint16_t* b, int64_t n,
                                      uint16_t* out) {
  const __m512i low = _mm512_load_si512(kPairOrder.data()),
                high = _mm512_load_si512(kPairOrder.data() + 32);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i va = _mm512_loadu_si512(a + i);
    const __m512i vb = b == nullptr ? _mm512_setzero_si512() : _mm512_loadu_si512(b + i);
    _mm512_storeu_si512(out + 2 * i, _mm512_permutex2var_epi16(va, low, vb));
    _mm512_storeu_si512(out + 2 * i + 32, _mm512_permutex2var_epi16(va, high, vb));
  }
  if (i < n) {
    _mm512_storeu_si512(out + 2 * i,
                        interleave(load_or_zero(a + i), load_or_zero(b ? b + i : nullptr)));
  }
}

// The tiles' configuration: 8 tiles of 16 rows of 64 bytes. A constant in
// memory: GCC 12 takes ldtilecfg for a read of its first byte only and
// dropped the stores of a configuration built on the stack.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
inline constexpr TileConfig kTileConfig{};

// Loads the configuration on this thread for its lifetime, then releases
// the tiles (their state is per thread).
class TileScope {
 public:
  TANDEM_AMX TileScope() { _tile_loadconfig(&kTileConfig); }
  TANDEM_AMX ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

}  // namespace tandem::kernels::detail
