#pragma once
// Private: 16 floats at a time from and to f32 or bf16 storage, and e^x on
// 16 lanes, for the hand-vectorised AVX-512 kernels (max pooling, batch
// norm's rows, bf16 element-wise arithmetic, GELU, attention's rows) where
// GCC leaves 16-bit storage scalar. Only for functions compiled with
// TANDEM_AVX512 and called where has_avx512().

#include <immintrin.h>

#include <cstdint>

#include "tandem/kernels/detail/float_io.h"

// The target of tandem's AVX-512 kernels: AVX-512 as every AVX-512 server
// CPU since Skylake-SP has it (F, BW, VL and DQ: oneDNN's avx512_core),
// and AVX512-BF16's instructions, which the kernels run only where
// has_avx512_bf16() says the CPU has them (bf16_bits, the dot products).
#define TANDEM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
// The same target, marking a function that runs AVX512-BF16's instructions
// unconditionally: called only where has_avx512_bf16().
#define TANDEM_AVX512_BF16 TANDEM_AVX512

namespace tandem::kernels::detail {

// Whether TANDEM_MAX_CPU_ISA lets tandem's AVX-512 kernels run, and their
// AVX512-BF16 instructions (cpu_isa.cc).
bool avx512_allowed();
bool avx512_bf16_allowed();

// Whether tandem's AVX-512 kernels run: the CPU has AVX-512 F, BW, VL and
// DQ and TANDEM_MAX_CPU_ISA does not cap them. Asked once; inline, as
// kernels ask per row.
inline bool has_avx512() {
  static const bool yes = avx512_allowed() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return yes;
}

// Whether tandem's AVX-512 kernels run and may use AVX512-BF16's
// instructions (vdpbf16ps, vcvtne2ps2bf16): the CPU has them and
// TANDEM_MAX_CPU_ISA is not avx512_core or below.
inline bool has_avx512_bf16() {
  static const bool yes =
      has_avx512() && avx512_bf16_allowed() && __builtin_cpu_supports("avx512bf16");
  return yes;
}

// has_avx512_bf16() as a plain variable, set as the library loads (false
// where TANDEM_MAX_CPU_ISA holds a value has_avx512() refuses), for
// bf16_bits in hot loops: the function-local static's guard there, a
// possible call, made GCC keep the loops' vectors on the stack.
extern const bool converts_bf16_natively;

TANDEM_AVX512 inline __m512 load16(const float* p) {
  return _mm512_loadu_ps(p);
}

// 16 bf16, widened exactly.
TANDEM_AVX512 inline __m512 widen16(__m256i bf16) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16), 16));
}

TANDEM_AVX512 inline __m512 load16(const uint16_t* p) {
  return widen16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

TANDEM_AVX512 inline void store16(float* p, __m512 v) {
  _mm512_storeu_ps(p, v);
}

// v's bf16 bits in the low half of each 32-bit lane, rounded to nearest
// even as float_to_bf16 (a NaN stays a NaN, quietened).
TANDEM_AVX512 inline __m512i bf16_lanes(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_mov_epi32(rounded, nan,
                               _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40)));
}

// v's bf16 bits as bf16_lanes rounds them, in integer arithmetic (any
// AVX-512 CPU).
TANDEM_AVX512 inline __m256i bf16_bits_integer(__m512 v) {
  return _mm512_cvtepi32_epi16(bf16_lanes(v));
}

// vfpclassps's class bit for subnormals.
constexpr int kSubnormalClass = 0x20;

// The same bits by AVX512-BF16's conversion (on Zen 4 the rounding above
// cost more than the rest of batch norm's normalising loop): it rounds as
// bf16_lanes does but flushes subnormal inputs to zero, so those lanes,
// rare, are redone in integer arithmetic. lo's bits in the low half.
TANDEM_AVX512_BF16 inline __m512i bf16_bits_native(__m512 lo, __m512 hi) {
  const __m512i bits = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
  const __mmask16 lo_subnormal = _mm512_fpclass_ps_mask(lo, kSubnormalClass);
  const __mmask16 hi_subnormal = _mm512_fpclass_ps_mask(hi, kSubnormalClass);
  // Tested in the mask registers: moving them to general ones to join them
  // cost more than the conversion on Zen 4.
  if (_kortestz_mask16_u8(lo_subnormal, hi_subnormal)) return bits;
  const __m512i exact =
      _mm512_inserti64x4(_mm512_castsi256_si512(bf16_bits_integer(lo)), bf16_bits_integer(hi), 1);
  return _mm512_mask_mov_epi16(bits, _mm512_kunpackw(hi_subnormal, lo_subnormal), exact);
}

TANDEM_AVX512_BF16 inline __m256i bf16_bits_native(__m512 v) {
  const __m256i bits = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
  const __mmask16 subnormal = _mm512_fpclass_ps_mask(v, kSubnormalClass);
  if (_kortestz_mask16_u8(subnormal, subnormal)) return bits;
  return _mm256_mask_mov_epi16(bits, subnormal, bf16_bits_integer(v));
}

// v's bf16 bits (float_to_bf16's), by the fastest means the CPU has.
TANDEM_AVX512 inline __m256i bf16_bits(__m512 v) {
  return converts_bf16_natively ? bf16_bits_native(v) : bf16_bits_integer(v);
}

TANDEM_AVX512 inline void store16(uint16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bf16_bits(v));
}

TANDEM_AVX512 inline __m512 load16(const Bf16* p) {
  return load16(reinterpret_cast<const uint16_t*>(p));
}

TANDEM_AVX512 inline void store16(Bf16* p, __m512 v) {
  store16(reinterpret_cast<uint16_t*>(p), v);
}

// 32 values, lo's first: one conversion and one store for both where the
// CPU has AVX512-BF16 (for loops that can pair their vectors).
TANDEM_AVX512 inline void store32(float* p, __m512 lo, __m512 hi) {
  _mm512_storeu_ps(p, lo);
  _mm512_storeu_ps(p + 16, hi);
}

TANDEM_AVX512 inline void store32(Bf16* p, __m512 lo, __m512 hi) {
  if (converts_bf16_natively) {
    _mm512_storeu_si512(p, bf16_bits_native(lo, hi));
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bf16_bits_integer(lo));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 16), bf16_bits_integer(hi));
  }
}

// The first n (< 16) lanes: for a row's last partial block.
TANDEM_AVX512 inline __mmask16 first_lanes(int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}

TANDEM_AVX512 inline void store16_masked(float* p, __m512 v, __mmask16 m) {
  _mm512_mask_storeu_ps(p, m, v);
}

// To bf16 bits as store16, writing only the lanes in m.
TANDEM_AVX512 inline void store16_masked(Bf16* p, __m512 v, __mmask16 m) {
  _mm256_mask_storeu_epi16(p, m, bf16_bits(v));
}

// Lanes [8 half, 8 half + 8) of v, widened to double.
template <int half>
TANDEM_AVX512 inline __m512d widen8(__m512 v) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), half)));
}

// acc[0, 16) += v's lanes, in double.
TANDEM_AVX512 inline void accumulate16(double* acc, __m512 v) {
  _mm512_storeu_pd(acc, _mm512_add_pd(_mm512_loadu_pd(acc), widen8<0>(v)));
  _mm512_storeu_pd(acc + 8, _mm512_add_pd(_mm512_loadu_pd(acc + 8), widen8<1>(v)));
}

TANDEM_AVX512 inline __m512 splat(float v) {
  return _mm512_set1_ps(v);
}

// e^x: fast_exp.h's reduction and polynomial, 2^n applied by scalef, which
// gives 0 and infinity past float's range (and subnormals below -87.3,
// where fast_exp gives 0). x is clamped to [-104, 104] first so that the
// reduction stays finite for infinite x; a NaN stays a NaN.
TANDEM_AVX512 inline __m512 exp16(__m512 x) {
  // max and min return their second operand when either is NaN.
  x = _mm512_min_ps(splat(104.0f), _mm512_max_ps(splat(-104.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, splat(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, splat(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, splat(-2.12194440e-4f), r);
  __m512 p = splat(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, splat(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, splat(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, splat(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, splat(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, splat(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), splat(1.0f));
  return _mm512_scalef_ps(p, n);
}

// Transposes 16 rows of 16 32-bit values in place: r[m][j] <- r[j][m].
TANDEM_AVX512 inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // r[4g + k], lane l: column 4l + k of rows 4g .. 4g + 3.
  for (int g = 0; g < 4; ++g) {
    r[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    r[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  // Row 4l + k gathers lane l of r[k], r[4 + k], r[8 + k], r[12 + k].
  for (int k = 0; k < 4; ++k) {
    const __m512i v0 = _mm512_shuffle_i32x4(r[k], r[4 + k], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(r[k], r[4 + k], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0xEE);
    t[k] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    t[4 + k] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    t[8 + k] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    t[12 + k] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

}  // namespace tandem::kernels::detail
