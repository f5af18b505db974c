#pragma once
// Private: f32 to bf16 over a buffer, float_to_bf16's bits (nearest even, a
// NaN quietened, subnormals kept), by the fastest means the CPU has; the
// means apart for the tests, which check each against the scalar rounding.

#include <cstdint>

namespace tandem::detail {

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n);

// The scalar rounding, compiled for each ISA (TANDEM_TARGET_CLONES).
void f32_to_bf16_portable(const float* src, uint16_t* dst, int64_t n);
// The rounding in AVX-512 integer arithmetic; needs AVX-512 F.
void f32_to_bf16_avx512(const float* src, uint16_t* dst, int64_t n);
// AVX512-BF16's conversion instruction; needs AVX512-BF16, BW and DQ.
void f32_to_bf16_native(const float* src, uint16_t* dst, int64_t n);

// Whether this CPU runs each.
bool cpu_runs_f32_to_bf16_avx512();
bool cpu_runs_f32_to_bf16_native();

}  // namespace tandem::detail
