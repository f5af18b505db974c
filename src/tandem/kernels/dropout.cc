#include "tandem/kernels/dropout.h"

#include <cmath>

#include "tandem/base/parallel.h"
#include "tandem/base/random.h"
#include "tandem/kernels/detail/checks.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/float_io.h"

namespace tandem::kernels {
namespace {

using detail::dispatch_floating;
using detail::from_f32;
using detail::kPointwiseGrain;
using detail::to_f32;

void check_probability(float p) {
  if (!(p >= 0.0f && p < 1.0f)) {
    TANDEM_THROW(InvalidArgument, "dropout probability must be in [0, 1), got ", p);
  }
}

}  // namespace

DropoutResult dropout(const Tensor& x, float p, uint64_t seed, uint64_t offset) {
  check_probability(p);
  TANDEM_DISPATCH_CUDA(x, dropout(x, p, seed, offset));
  DropoutResult result;
  result.y = Tensor::empty(x.shape(), x.dtype(), x.device());
  result.mask = Tensor::empty(x.shape(), DType::u8, x.device());
  // Keep when bits >= p * 2^32; computed in double so p close to 1 stays exact.
  const uint64_t threshold = static_cast<uint64_t>(std::ldexp(static_cast<double>(p), 32));
  const float keep_scale = 1.0f / (1.0f - p);
  uint8_t* mask = result.mask.data<uint8_t>();
  dispatch_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.raw_data());
    T* out = static_cast<T*>(result.y.raw_data());
    parallel_for(x.numel(), kPointwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const bool keep = random_bits_at(seed, offset + static_cast<uint64_t>(i)) >= threshold;
        mask[i] = keep ? 1 : 0;
        out[i] = from_f32<T>(keep ? to_f32(in[i]) * keep_scale : 0.0f);
      }
    });
  });
  return result;
}

Tensor dropout_backward(const Tensor& dy, const Tensor& mask, float p) {
  check_probability(p);
  detail::check_same_device("dropout_backward", dy, {&mask});
  if (mask.dtype() != DType::u8 || mask.shape() != dy.shape()) {
    TANDEM_THROW(ShapeError, "dropout_backward: mask ", mask.to_string(), " does not match dy ",
                 dy.to_string());
  }
  TANDEM_DISPATCH_CUDA(dy, dropout_backward(dy, mask, p));
  const float keep_scale = 1.0f / (1.0f - p);
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  const uint8_t* m = mask.data<uint8_t>();
  dispatch_floating(dy.dtype(), "dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(dy.raw_data());
    T* out = static_cast<T*>(dx.raw_data());
    parallel_for(dy.numel(), kPointwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        out[i] = from_f32<T>(m[i] ? to_f32(g[i]) * keep_scale : 0.0f);
      }
    });
  });
  return dx;
}

}  // namespace tandem::kernels
