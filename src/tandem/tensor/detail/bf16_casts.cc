#include "tandem/tensor/detail/bf16_casts.h"

#include <immintrin.h>

#include "tandem/base/target_clones.h"
#include "tandem/tensor/convert.h"

namespace tandem::detail {

TANDEM_TARGET_CLONES void f32_to_bf16_portable(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

// float_to_bf16's rounding 16 lanes at a time, narrowing with vpmovdw;
// about 2x what the compiler makes of the portable loop.
__attribute__((target("avx512f"))) void f32_to_bf16_avx512(const float* src, uint16_t* dst,
                                                           int64_t n) {
  const __m512i bias = _mm512_set1_epi32(0x7FFF);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i infinity = _mm512_set1_epi32(0x7F800000);
  const __m512i quiet_bit = _mm512_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_castps_si512(_mm512_loadu_ps(src + i));
    const __m512i high = _mm512_srli_epi32(x, 16);
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(x, bias), _mm512_and_si512(high, one)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs_mask), infinity);
    const __m512i bits = _mm512_mask_or_epi32(rounded, nan, high, quiet_bit);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(bits));
  }
  for (; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

// vcvtne2ps2bf16, 32 values an instruction, rounds as float_to_bf16 but
// flushes subnormal inputs to zero: a block holding one takes the integer
// loop. On data in cache about 2x the integer loop on Zen 4, whose 512-bit
// integer operations take two cycles each; a large tensor's cast is bound
// by memory either way (kernels_bench's CastToBf16).
__attribute__((target("avx512f,avx512bw,avx512dq,avx512bf16"))) void f32_to_bf16_native(
    const float* src, uint16_t* dst, int64_t n) {
  constexpr int kSubnormalClass = 0x20;  // vfpclassps's class bit
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
    if (!_kortestz_mask16_u8(_mm512_fpclass_ps_mask(lo, kSubnormalClass),
                             _mm512_fpclass_ps_mask(hi, kSubnormalClass))) {
      f32_to_bf16_avx512(src + i, dst + i, 32);
      continue;
    }
    _mm512_storeu_si512(dst + i, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
  f32_to_bf16_avx512(src + i, dst + i, n - i);
}

bool cpu_runs_f32_to_bf16_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

bool cpu_runs_f32_to_bf16_native() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bf16");
  return yes;
}

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  if (cpu_runs_f32_to_bf16_native()) return f32_to_bf16_native(src, dst, n);
  if (cpu_runs_f32_to_bf16_avx512()) return f32_to_bf16_avx512(src, dst, n);
  f32_to_bf16_portable(src, dst, n);
}

}  // namespace tandem::detail
