#pragma once
// Private: pointwise loops over f32, bf16 and f16 storage for kernels whose
// per-element function is a float lambda (activations, kernels/unary.cc).
// 16-bit storage is widened and narrowed a block at a time with the bulk
// (vector-instruction) converters, so that the function runs on floats;
// converting element by element is several times slower for f16.

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/float_io.h"
#include "tandem/tensor/convert.h"
#include "tandem/tensor/tensor.h"

namespace tandem::kernels::detail {

inline constexpr int64_t kConvertBlock = 512;

template <typename G>
void for_blocks(int64_t begin, int64_t end, G g) {
  for (int64_t at = begin; at < end; at += kConvertBlock) g(at, std::min(kConvertBlock, end - at));
}

// out[i] = f(x[i]) over one floating dtype.
template <typename F>
Tensor map_unary(const Tensor& x, const char* op, F f) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(x.numel(), kPointwiseGrain, [&](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<T, float>) {
        for (int64_t i = begin; i < end; ++i) o[i] = f(in[i]);
      } else {
        for_blocks(begin, end, [&](int64_t at, int64_t n) {
          float v[kConvertBlock];
          convert_on_this_thread(in + at, x.dtype(), v, DType::f32, n);
          for (int64_t j = 0; j < n; ++j) v[j] = f(v[j]);
          convert_on_this_thread(v, DType::f32, o + at, x.dtype(), n);
        });
      }
    });
  });
  return out;
}

// out[i] = f(a[i], b[i]) over one floating dtype (a and b checked by the
// caller: detail::check_matching).
template <typename F>
Tensor map_binary(const Tensor& a, const Tensor& b, const char* op, F f) {
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  dispatch_floating(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a.raw_data());
    const T* pb = static_cast<const T*>(b.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(a.numel(), kPointwiseGrain, [&](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<T, float>) {
        for (int64_t i = begin; i < end; ++i) o[i] = f(pa[i], pb[i]);
      } else {
        for_blocks(begin, end, [&](int64_t at, int64_t n) {
          float va[kConvertBlock], vb[kConvertBlock];
          convert_on_this_thread(pa + at, a.dtype(), va, DType::f32, n);
          convert_on_this_thread(pb + at, a.dtype(), vb, DType::f32, n);
          for (int64_t j = 0; j < n; ++j) va[j] = f(va[j], vb[j]);
          convert_on_this_thread(va, DType::f32, o + at, a.dtype(), n);
        });
      }
    });
  });
  return out;
}

}  // namespace tandem::kernels::detail
