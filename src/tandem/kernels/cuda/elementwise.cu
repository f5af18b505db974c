// Pointwise kernels: broadcasting add and mul, scale, add_into, the
// activations forward and backward, and matmul's bias + activation epilogue.
// Computed in f32 whatever the storage dtype, as on the CPU; the operands
// are checked by the public kernels (kernels/elementwise.cc, activation.cc).
#include <cmath>

#include "tandem/kernels/cuda/kernels.h"
#include "tandem/kernels/elementwise.h"
#include "tandem/tensor/cuda/elements.cuh"
#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

using kernels::Activation;

constexpr unsigned int kThreads = 256;
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kTanhScale = 0.7978845608028654f;
constexpr float kTanhCubic = 0.044715f;

__device__ float activation_forward(Activation a, float v) {
  switch (a) {
    case Activation::none:
      return v;
    case Activation::relu:
      return v > 0.0f ? v : 0.0f;
    case Activation::gelu:
      return 0.5f * v * (1.0f + erff(v * kInvSqrt2));
    case Activation::gelu_tanh:
      return 0.5f * v * (1.0f + tanhf(kTanhScale * (v + kTanhCubic * v * v * v)));
    case Activation::silu:
      return v / (1.0f + expf(-v));
  }
  return v;
}

// dy times the derivative, given relu's output or the others' input.
__device__ float activation_derivative(Activation a, float g, float v) {
  switch (a) {
    case Activation::none:
      return g;
    case Activation::relu:
      return v > 0.0f ? g : 0.0f;
    case Activation::gelu: {
      const float cdf = 0.5f * (1.0f + erff(v * kInvSqrt2));
      const float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);
      return g * (cdf + v * pdf);
    }
    case Activation::gelu_tanh: {
      const float t = tanhf(kTanhScale * (v + kTanhCubic * v * v * v));
      const float inner = kTanhScale * (1.0f + 3.0f * kTanhCubic * v * v);
      return g * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * inner);
    }
    case Activation::silu: {
      const float s = 1.0f / (1.0f + expf(-v));
      return g * s * (1.0f + v * (1.0f - s));
    }
  }
  return g;
}

enum class Binary : uint8_t { add, mul };

// out[i] = a[i] op b[i % nb]: b is a's shape, its trailing dimensions, or one element.
template <typename T>
__global__ void binary_kernel(const T* a, const T* b, T* out, int64_t n, int64_t nb, Binary op) {
  TANDEM_CUDA_FOR(i, n) {
    const float x = load(a, i), y = load(b, i % nb);
    store(out, i, op == Binary::add ? x + y : x * y);
  }
}

template <typename T>
__global__ void scale_kernel(const T* a, T* out, int64_t n, float factor) {
  TANDEM_CUDA_FOR(i, n) store(out, i, load(a, i) * factor);
}

template <typename D, typename S>
__global__ void add_into_kernel(D* dst, const S* src, int64_t n, float alpha) {
  TANDEM_CUDA_FOR(i, n) store(dst, i, load(dst, i) + alpha * load(src, i));
}

template <typename T>
__global__ void activation_kernel(const T* x, T* y, int64_t n, Activation a) {
  TANDEM_CUDA_FOR(i, n) store(y, i, activation_forward(a, load(x, i)));
}

template <typename T>
__global__ void activation_backward_kernel(const T* dy, const T* saved, T* dx, int64_t n,
                                           Activation a) {
  TANDEM_CUDA_FOR(i, n) store(dx, i, activation_derivative(a, load(dy, i), load(saved, i)));
}

// out (rows, cols) = act(out + bias[col]); bias f32 or absent.
template <typename T>
__global__ void bias_activation_kernel(T* out, const float* bias, int64_t n, int64_t cols,
                                       Activation a) {
  TANDEM_CUDA_FOR(i, n) {
    const float v = load(out, i) + (bias != nullptr ? bias[i % cols] : 0.0f);
    store(out, i, activation_forward(a, v));
  }
}

// Scales in place; any non-finite result sets *bad.
__global__ void scale_check_kernel(float* x, int64_t n, float factor, int* bad) {
  bool ok = true;
  TANDEM_CUDA_FOR(i, n) {
    const float v = x[i] * factor;
    x[i] = v;
    ok &= isfinite(v);
  }
  if (!ok) *bad = 1;
}

Tensor binary(const Tensor& a, const Tensor& b, Binary op, const char* name) {
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  const int64_t n = a.numel();
  if (n == 0) return out;
  DeviceGuard guard(a.device());
  dispatch_float(a.dtype(), name, [&](auto* tag) {
    using T = Element<decltype(tag)>;
    binary_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream(a.device())>>>(
        static_cast<const T*>(a.device_data()), static_cast<const T*>(b.device_data()),
        static_cast<T*>(out.device_data()), n, b.numel(), op);
  });
  check_launch(name);
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return binary(a, b, Binary::add, "add");
}

Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(a, b, Binary::mul, "mul");
}

Tensor scale(const Tensor& a, float factor) {
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  const int64_t n = a.numel();
  if (n == 0) return out;
  DeviceGuard guard(a.device());
  dispatch_float(a.dtype(), "scale", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    scale_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream(a.device())>>>(
        static_cast<const T*>(a.device_data()), static_cast<T*>(out.device_data()), n, factor);
  });
  check_launch("scale");
  return out;
}

void add_into(Tensor& dst, const Tensor& src, float alpha) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  DeviceGuard guard(dst.device());
  dispatch_float(dst.dtype(), "add_into", [&](auto* dtag) {
    using D = Element<decltype(dtag)>;
    dispatch_float(src.dtype(), "add_into", [&](auto* stag) {
      using S = Element<decltype(stag)>;
      add_into_kernel<D, S><<<blocks_for(n, kThreads), kThreads, 0, stream(dst.device())>>>(
          static_cast<D*>(dst.device_data()), static_cast<const S*>(src.device_data()), n, alpha);
    });
  });
  check_launch("add_into");
}

Tensor activate(Activation activation, const Tensor& x) {
  if (activation == Activation::none) return x;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t n = x.numel();
  if (n == 0) return y;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "activation", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    activation_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream(x.device())>>>(
        static_cast<const T*>(x.device_data()), static_cast<T*>(y.device_data()), n, activation);
  });
  check_launch("activation");
  return y;
}

Tensor activation_backward(Activation activation, const Tensor& dy, const Tensor& saved) {
  if (activation == Activation::none) return dy;
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  const int64_t n = dy.numel();
  if (n == 0) return dx;
  DeviceGuard guard(dy.device());
  dispatch_float(dy.dtype(), "activation_backward", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    activation_backward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream(dy.device())>>>(
        static_cast<const T*>(dy.device_data()), static_cast<const T*>(saved.device_data()),
        static_cast<T*>(dx.device_data()), n, activation);
  });
  check_launch("activation_backward");
  return dx;
}

bool scale_and_check_finite(const std::vector<Tensor>& tensors, float factor) {
  const Tensor& first = tensors.front();
  const Device device = first.device();
  DeviceGuard guard(device);
  Tensor flag = Tensor::zeros(Shape{1}, DType::i32, device, MemoryCategory::workspace);
  for (const Tensor& t : tensors) {
    const int64_t n = t.numel();
    if (n == 0) continue;
    scale_check_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream(device)>>>(
        static_cast<float*>(t.device_data()), n, factor, static_cast<int*>(flag.device_data()));
    check_launch("scale_and_check_finite");
  }
  return flag.item() == 0.0f;  // one read back for all the tensors
}

void bias_activation_inplace(Tensor& out, const Tensor& bias, Activation activation) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int64_t cols = out.dim(out.rank() - 1);
  DeviceGuard guard(out.device());
  dispatch_float(out.dtype(), "matmul epilogue", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    bias_activation_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream(out.device())>>>(
        static_cast<T*>(out.device_data()),
        bias.defined() ? static_cast<const float*>(bias.device_data()) : nullptr, n, cols,
        activation);
  });
  check_launch("matmul epilogue");
}

}  // namespace tandem::cuda
