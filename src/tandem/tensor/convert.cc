#include "tandem/tensor/convert.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/target_clones.h"
#include "tandem/tensor/detail/bf16_casts.h"

namespace tandem {
namespace {

// Elements per parallel range: conversions are memory-bound, so only large
// buffers are worth splitting.
constexpr int64_t kGrain = 1 << 16;

TANDEM_TARGET_CLONES void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}
// f16 has conversion instructions (F16C, and AVX-512's 16-lane forms) that
// the compiler does not derive from the portable bit manipulation; they round
// to nearest even and keep subnormals, inf and NaN as float_to_f16 does.
__attribute__((target("avx512f"))) void f32_to_f16_avx512(const float* src, uint16_t* dst,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = float_to_f16(src[i]);
}
__attribute__((target("avx512f"))) void f16_to_f32_avx512(const uint16_t* src, float* dst,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = f16_to_float(src[i]);
}
__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* src, uint16_t* dst,
                                                         int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = float_to_f16(src[i]);
}
__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const uint16_t* src, float* dst,
                                                         int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = f16_to_float(src[i]);
}

enum class F16Isa { avx512, f16c, none };
F16Isa f16_isa() {
  static const F16Isa isa = [] {
    if (__builtin_cpu_supports("avx512f")) return F16Isa::avx512;
    // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports
    // does not know the name.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
    return f16c ? F16Isa::f16c : F16Isa::none;
  }();
  return isa;
}

void f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  switch (f16_isa()) {
    case F16Isa::avx512:
      return f32_to_f16_avx512(src, dst, n);
    case F16Isa::f16c:
      return f32_to_f16_f16c(src, dst, n);
    case F16Isa::none:
      break;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_f16(src[i]);
}
void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  switch (f16_isa()) {
    case F16Isa::avx512:
      return f16_to_f32_avx512(src, dst, n);
    case F16Isa::f16c:
      return f16_to_f32_f16c(src, dst, n);
    case F16Isa::none:
      break;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_float(src[i]);
}

float load_as_float(const void* src, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f32:
      return static_cast<const float*>(src)[i];
    case DType::bf16:
      return bf16_to_float(static_cast<const uint16_t*>(src)[i]);
    case DType::f16:
      return f16_to_float(static_cast<const uint16_t*>(src)[i]);
    case DType::i32:
      return static_cast<float>(static_cast<const int32_t*>(src)[i]);
    case DType::u8:
      return static_cast<float>(static_cast<const uint8_t*>(src)[i]);
    case DType::i64:
      return static_cast<float>(static_cast<const int64_t*>(src)[i]);
  }
  return 0.0f;
}

template <typename Int>
Int saturate(float value) {
  if (std::isnan(value)) return 0;
  const float rounded = std::nearbyint(value);
  if (rounded <= static_cast<float>(std::numeric_limits<Int>::min())) {
    return std::numeric_limits<Int>::min();
  }
  if (rounded >= static_cast<float>(std::numeric_limits<Int>::max())) {
    return std::numeric_limits<Int>::max();
  }
  return static_cast<Int>(rounded);
}

void store_from_float(void* dst, DType dtype, int64_t i, float value) {
  switch (dtype) {
    case DType::f32:
      static_cast<float*>(dst)[i] = value;
      break;
    case DType::bf16:
      static_cast<uint16_t*>(dst)[i] = float_to_bf16(value);
      break;
    case DType::f16:
      static_cast<uint16_t*>(dst)[i] = float_to_f16(value);
      break;
    case DType::i32:
      static_cast<int32_t*>(dst)[i] = saturate<int32_t>(value);
      break;
    case DType::u8:
      static_cast<uint8_t*>(dst)[i] = saturate<uint8_t>(value);
      break;
    case DType::i64:
      static_cast<int64_t*>(dst)[i] = saturate<int64_t>(value);
      break;
  }
}

bool is_integer(DType dtype) {
  return dtype == DType::i32 || dtype == DType::u8 || dtype == DType::i64;
}

int64_t load_as_int64(const void* src, DType dtype, int64_t i) {
  if (dtype == DType::i64) return static_cast<const int64_t*>(src)[i];
  if (dtype == DType::i32) return static_cast<const int32_t*>(src)[i];
  return static_cast<const uint8_t*>(src)[i];
}

template <typename Int>
Int saturate(int64_t value) {
  return static_cast<Int>(
      std::clamp<int64_t>(value, std::numeric_limits<Int>::min(), std::numeric_limits<Int>::max()));
}

// Between integer types exactly, saturating where the target is narrower
// (through float, values past 2^24 would round).
void store_from_int64(void* dst, DType dtype, int64_t i, int64_t value) {
  if (dtype == DType::i64) static_cast<int64_t*>(dst)[i] = value;
  if (dtype == DType::i32) static_cast<int32_t*>(dst)[i] = saturate<int32_t>(value);
  if (dtype == DType::u8) static_cast<uint8_t*>(dst)[i] = saturate<uint8_t>(value);
}

void convert_range(const void* src, DType s, void* dst, DType d, int64_t begin, int64_t end) {
  const int64_t n = end - begin;
  const auto* src_f32 = static_cast<const float*>(src) + begin;
  const auto* src_u16 = static_cast<const uint16_t*>(src) + begin;
  auto* dst_f32 = static_cast<float*>(dst) + begin;
  auto* dst_u16 = static_cast<uint16_t*>(dst) + begin;
  if (s == DType::f32 && d == DType::bf16) return detail::f32_to_bf16(src_f32, dst_u16, n);
  if (s == DType::bf16 && d == DType::f32) return bf16_to_f32(src_u16, dst_f32, n);
  if (s == DType::f32 && d == DType::f16) return f32_to_f16(src_f32, dst_u16, n);
  if (s == DType::f16 && d == DType::f32) return f16_to_f32(src_u16, dst_f32, n);
  if (is_integer(s) && is_integer(d)) {
    for (int64_t i = begin; i < end; ++i) store_from_int64(dst, d, i, load_as_int64(src, s, i));
    return;
  }
  for (int64_t i = begin; i < end; ++i) store_from_float(dst, d, i, load_as_float(src, s, i));
}

}  // namespace

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t count) {
  if (count < 0) TANDEM_THROW(InvalidArgument, "convert: negative count ", count);
  if (count == 0) return;
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, static_cast<size_t>(count) * dtype_size(src_dtype));
    return;
  }
  parallel_for(count, kGrain, [&](int64_t begin, int64_t end) {
    convert_range(src, src_dtype, dst, dst_dtype, begin, end);
  });
}

void convert_on_this_thread(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                            int64_t count) {
  if (count <= 0) return;
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, static_cast<size_t>(count) * dtype_size(src_dtype));
    return;
  }
  convert_range(src, src_dtype, dst, dst_dtype, 0, count);
}

}  // namespace tandem
