#pragma once
// Private: 16 floats at a time from and to f32 or bf16 storage, for the
// hand-vectorised AVX-512 kernels (max pooling, batch norm's rows, bf16
// element-wise arithmetic) where GCC leaves 16-bit storage scalar. Only
// for functions compiled with target("avx512f") and called where
// has_avx512f().

#include <immintrin.h>

#include <cstdint>

#include "tandem/kernels/detail/float_io.h"

namespace tandem::kernels::detail {

// Whether this CPU runs the functions below (asked once).
inline bool has_avx512f() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

__attribute__((target("avx512f"))) inline __m512 load16(const float* p) {
  return _mm512_loadu_ps(p);
}

// bf16 bits, widened exactly.
__attribute__((target("avx512f"))) inline __m512 load16(const uint16_t* p) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

__attribute__((target("avx512f"))) inline void store16(float* p, __m512 v) {
  _mm512_storeu_ps(p, v);
}

// To bf16 bits, rounded to nearest even as float_to_bf16 (a NaN stays a
// NaN, quietened).
__attribute__((target("avx512f"))) inline void store16(uint16_t* p, __m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  rounded = _mm512_mask_mov_epi32(
      rounded, nan, _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(rounded));
}

__attribute__((target("avx512f"))) inline __m512 load16(const Bf16* p) {
  return load16(reinterpret_cast<const uint16_t*>(p));
}

__attribute__((target("avx512f"))) inline void store16(Bf16* p, __m512 v) {
  store16(reinterpret_cast<uint16_t*>(p), v);
}

}  // namespace tandem::kernels::detail
