// Inverted dropout on the device; the mask bits come from the same
// counter-based generator as the CPU's (cuda/random.cuh).
#include <cmath>

#include "tandem/base/error.h"
#include "tandem/kernels/cuda/kernels.h"
#include "tandem/kernels/cuda/random.cuh"
#include "tandem/tensor/cuda/elements.cuh"
#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

constexpr unsigned int kThreads = 256;

template <typename T>
__global__ void dropout_kernel(const T* x, T* y, uint8_t* mask, int64_t n, uint64_t seed,
                               uint64_t offset, uint64_t threshold, float keep_scale) {
  TANDEM_CUDA_FOR(i, n) {
    const bool keep = random_bits_at(seed, offset + static_cast<uint64_t>(i)) >= threshold;
    mask[i] = keep ? 1 : 0;
    store(y, i, keep ? load(x, i) * keep_scale : 0.0f);
  }
}

template <typename T>
__global__ void dropout_backward_kernel(const T* dy, const uint8_t* mask, T* dx, int64_t n,
                                        float keep_scale) {
  TANDEM_CUDA_FOR(i, n) {
    store(dx, i, mask[i] ? load(dy, i) * keep_scale : 0.0f);
  }
}

}  // namespace

// Operands checked by kernels::dropout and kernels::dropout_backward.
kernels::DropoutResult dropout(const Tensor& x, float p, uint64_t seed, uint64_t offset) {
  kernels::DropoutResult result;
  result.y = Tensor::empty(x.shape(), x.dtype(), x.device());
  result.mask = Tensor::empty(x.shape(), DType::u8, x.device());
  const int64_t n = x.numel();
  if (n == 0) return result;
  // Keep when bits >= p * 2^32, as on the CPU.
  const uint64_t threshold = static_cast<uint64_t>(std::ldexp(static_cast<double>(p), 32));
  const float keep_scale = 1.0f / (1.0f - p);
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "dropout", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    dropout_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream(x.device())>>>(
        static_cast<const T*>(x.device_data()), static_cast<T*>(result.y.device_data()),
        static_cast<uint8_t*>(result.mask.device_data()), n, seed, offset, threshold, keep_scale);
  });
  check_launch("dropout");
  return result;
}

Tensor dropout_backward(const Tensor& dy, const Tensor& mask, float p) {
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  const int64_t n = dy.numel();
  if (n == 0) return dx;
  const float keep_scale = 1.0f / (1.0f - p);
  DeviceGuard guard(dy.device());
  dispatch_float(dy.dtype(), "dropout_backward", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    dropout_backward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream(dy.device())>>>(
        static_cast<const T*>(dy.device_data()), static_cast<const uint8_t*>(mask.device_data()),
        static_cast<T*>(dx.device_data()), n, keep_scale);
  });
  check_launch("dropout_backward");
  return dx;
}

}  // namespace tandem::cuda
