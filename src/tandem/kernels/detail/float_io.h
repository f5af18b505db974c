#pragma once
// Private helpers for pointwise kernels over f32, bf16 and f16 storage: values
// are loaded as float, computed in float and stored back rounded to nearest
// even. Kernels are generic lambdas instantiated once per storage type.

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "tandem/base/error.h"
#include "tandem/tensor/convert.h"
#include "tandem/tensor/dtype.h"

namespace tandem::kernels::detail {

struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

inline float to_f32(float v) {
  return v;
}
inline float to_f32(Bf16 v) {
  return bf16_to_float(v.bits);
}
inline float to_f32(F16 v) {
  return f16_to_float(v.bits);
}

template <typename T>
inline T from_f32(float v);
template <>
inline float from_f32<float>(float v) {
  return v;
}
template <>
inline Bf16 from_f32<Bf16>(float v) {
  return Bf16{float_to_bf16(v)};
}
template <>
inline F16 from_f32<F16>(float v) {
  return F16{float_to_f16(v)};
}

// Calls fn(T{}) with T the storage type of a floating dtype; throws ShapeError
// naming op for other dtypes.
template <typename Fn>
void dispatch_floating(DType dtype, std::string_view op, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn(float{});
      return;
    case DType::bf16:
      fn(Bf16{});
      return;
    case DType::f16:
      fn(F16{});
      return;
    default:
      TANDEM_THROW(ShapeError, op, ": expected a floating dtype (f32, bf16, f16), got ",
                   dtype_name(dtype));
  }
}

// Calls fn(float{}) for f32 and fn(Bf16{}) otherwise: for kernels whose
// callers admit only f32 and bf16 (the direct convolutions, batch norm's
// rows).
template <typename Fn>
void dispatch_f32_or_bf16(DType dtype, Fn&& fn) {
  if (dtype == DType::bf16) {
    fn(Bf16{});
  } else {
    fn(float{});
  }
}

// An unsigned integer of a storage type's width: kernels that only move or
// mask values (ReLU, max pooling's backward) work on the bits, which GCC
// vectorises where it leaves the Bf16/F16 wrappers scalar.
template <typename T>
using StorageBits = std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>;

// Elements per parallel range for simple pointwise loops.
inline constexpr int64_t kPointwiseGrain = 1 << 15;

}  // namespace tandem::kernels::detail
