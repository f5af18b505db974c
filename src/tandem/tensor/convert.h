#pragma once
// Conversions between f32 and the 16-bit float formats, rounding to nearest
// even; NaN stays NaN, overflow goes to infinity. Scalar versions are inline
// for kernels; the bulk versions are vectorised with runtime ISA dispatch.

#include <bit>
#include <cstdint>

#include "tandem/tensor/dtype.h"

namespace tandem {

inline uint16_t float_to_bf16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>((x & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

inline float bf16_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

inline uint16_t float_to_f16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  // Normal range: rebias the exponent (127 -> 15) and round the 13 dropped bits.
  const uint32_t normal = (abs - 0x38000000u + 0xFFFu + ((abs >> 13) & 1u)) >> 13;
  // Below 2^-14: adding 0.5 lines the value up on the half subnormal grid
  // (0.5's ulp is 2^-24) and lets the FPU round to nearest even.
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(std::bit_cast<float>(abs) + 0.5f) - 0x3F000000u;
  uint32_t r = abs < 0x38800000u ? subnormal : normal;
  r = abs >= 0x477FF000u ? 0x7C00u : r;                            // rounds past 65504
  r = abs > 0x7F800000u ? (0x7E00u | ((abs >> 13) & 0x3FFu)) : r;  // NaN stays quiet NaN
  return static_cast<uint16_t>(sign | r);
}

inline float f16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  const uint32_t shifted = static_cast<uint32_t>(bits & 0x7FFFu) << 13;
  const uint32_t normal = shifted + 0x38000000u;
  // inf/NaN: exponent 255; a NaN comes out quiet, as from the F16C instruction.
  const uint32_t special = (shifted + 0x70000000u) | (mantissa != 0 ? 0x00400000u : 0u);
  // Subnormal: mantissa * 2^-24, exact in float.
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(static_cast<float>(mantissa) * 5.9604644775390625e-8f);
  uint32_t r = exponent == 0x1Fu ? special : normal;
  r = exponent == 0 ? subnormal : r;
  return std::bit_cast<float>(sign | r);
}

// Converts count elements from src (of src_dtype) to dst (of dst_dtype).
// Floating types round to nearest even; to integer types values are rounded
// to nearest and saturated. Same dtype copies. Thread-safe; runs on the
// calling thread's intra-op threads for large counts.
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t count);
// As convert(), on the calling thread only: for blocks inside parallel loops.
void convert_on_this_thread(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                            int64_t count);

}  // namespace tandem
