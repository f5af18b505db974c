#include "tandem/kernels/activation.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <type_traits>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/eltwise.h"
#include "tandem/kernels/detail/float_io.h"

namespace tandem::kernels {
namespace {

using detail::dispatch_floating;
using detail::kPointwiseGrain;

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) {
    TANDEM_THROW(ShapeError, op, ": operands differ: ", a.to_string(), " and ", b.to_string());
  }
}

// 16-bit storage is widened and narrowed a block at a time with the bulk
// (vector-instruction) converters, so that the per-element function runs on
// floats; converting element by element is several times slower for f16.
constexpr int64_t kBlock = 512;

template <typename G>
void for_blocks(int64_t begin, int64_t end, G g) {
  for (int64_t at = begin; at < end; at += kBlock) g(at, std::min(kBlock, end - at));
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
          float v[kBlock];
          convert_on_this_thread(in + at, x.dtype(), v, DType::f32, n);
          for (int64_t j = 0; j < n; ++j) v[j] = f(v[j]);
          convert_on_this_thread(v, DType::f32, o + at, x.dtype(), n);
        });
      }
    });
  });
  return out;
}

// out[i] = f(a[i], b[i]) over one floating dtype.
template <typename F>
Tensor map_binary(const Tensor& a, const Tensor& b, const char* op, F f) {
  check_same(a, b, op);
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
          float va[kBlock], vb[kBlock];
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

constexpr float kInvSqrt2 = static_cast<float>(1.0 / std::numbers::sqrt2);
constexpr float kInvSqrt2Pi =
    static_cast<float>(1.0 / (std::numbers::sqrt2 * 1.7724538509055160273));

}  // namespace

std::string_view activation_name(Activation activation) {
  switch (activation) {
    case Activation::none:
      return "none";
    case Activation::relu:
      return "relu";
    case Activation::gelu:
      return "gelu";
    case Activation::gelu_tanh:
      return "gelu_tanh";
    case Activation::silu:
      return "silu";
  }
  return "invalid";
}

Activation parse_activation(std::string_view name) {
  if (name == "none" || name.empty()) return Activation::none;
  if (name == "relu") return Activation::relu;
  if (name == "gelu") return Activation::gelu;
  if (name == "gelu_tanh") return Activation::gelu_tanh;
  if (name == "silu") return Activation::silu;
  TANDEM_THROW(InvalidArgument, "unknown activation '", name,
               "' (expected none, relu, gelu, gelu_tanh or silu)");
}

Tensor relu(const Tensor& x) {
  TANDEM_DISPATCH_CUDA(x, activate(Activation::relu, x));
  return map_unary(x, "relu", [](float v) { return v > 0.0f ? v : 0.0f; });
}

Tensor relu_backward(const Tensor& dy, const Tensor& y) {
  TANDEM_DISPATCH_CUDA(dy, activation_backward(Activation::relu, dy, y));
  return map_binary(dy, y, "relu_backward", [](float g, float v) { return v > 0.0f ? g : 0.0f; });
}

namespace {

// f32 and bf16 take oneDNN's vectorised primitives; f16 the loops above.
bool vectorised(const Tensor& x) {
  return detail::eltwise_supported(x);
}

bool vectorised(const Tensor& dy, const Tensor& x, const char* op) {
  check_same(dy, x, op);
  return detail::eltwise_supported(x);
}

}  // namespace

Tensor gelu(const Tensor& x) {
  TANDEM_DISPATCH_CUDA(x, activate(Activation::gelu, x));
  if (vectorised(x)) return detail::eltwise_forward(Activation::gelu, x);
  return map_unary(x, "gelu", [](float v) { return 0.5f * v * (1.0f + std::erf(v * kInvSqrt2)); });
}

Tensor gelu_backward(const Tensor& dy, const Tensor& x) {
  TANDEM_DISPATCH_CUDA(dy, activation_backward(Activation::gelu, dy, x));
  if (vectorised(dy, x, "gelu_backward")) return detail::eltwise_backward(Activation::gelu, dy, x);
  return map_binary(dy, x, "gelu_backward", [](float g, float v) {
    const float cdf = 0.5f * (1.0f + std::erf(v * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * std::exp(-0.5f * v * v);
    return g * (cdf + v * pdf);
  });
}

// sqrt(2 / pi) and the cubic coefficient of the tanh approximation.
constexpr float kTanhScale = 0.7978845608028654f;
constexpr float kTanhCubic = 0.044715f;

Tensor gelu_tanh(const Tensor& x) {
  TANDEM_DISPATCH_CUDA(x, activate(Activation::gelu_tanh, x));
  if (vectorised(x)) return detail::eltwise_forward(Activation::gelu_tanh, x);
  return map_unary(x, "gelu_tanh", [](float v) {
    return 0.5f * v * (1.0f + std::tanh(kTanhScale * (v + kTanhCubic * v * v * v)));
  });
}

Tensor gelu_tanh_backward(const Tensor& dy, const Tensor& x) {
  TANDEM_DISPATCH_CUDA(dy, activation_backward(Activation::gelu_tanh, dy, x));
  if (vectorised(dy, x, "gelu_tanh_backward"))
    return detail::eltwise_backward(Activation::gelu_tanh, dy, x);
  return map_binary(dy, x, "gelu_tanh_backward", [](float g, float v) {
    const float t = std::tanh(kTanhScale * (v + kTanhCubic * v * v * v));
    const float inner = kTanhScale * (1.0f + 3.0f * kTanhCubic * v * v);
    return g * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * inner);
  });
}

Tensor silu(const Tensor& x) {
  TANDEM_DISPATCH_CUDA(x, activate(Activation::silu, x));
  if (vectorised(x)) return detail::eltwise_forward(Activation::silu, x);
  return map_unary(x, "silu", [](float v) { return v / (1.0f + std::exp(-v)); });
}

Tensor silu_backward(const Tensor& dy, const Tensor& x) {
  TANDEM_DISPATCH_CUDA(dy, activation_backward(Activation::silu, dy, x));
  if (vectorised(dy, x, "silu_backward")) return detail::eltwise_backward(Activation::silu, dy, x);
  return map_binary(dy, x, "silu_backward", [](float g, float v) {
    const float s = 1.0f / (1.0f + std::exp(-v));
    return g * s * (1.0f + v * (1.0f - s));
  });
}

Tensor activate(Activation activation, const Tensor& x) {
  switch (activation) {
    case Activation::none:
      return x;
    case Activation::relu:
      return relu(x);
    case Activation::gelu:
      return gelu(x);
    case Activation::gelu_tanh:
      return gelu_tanh(x);
    case Activation::silu:
      return silu(x);
  }
  return x;
}

Tensor activation_backward(Activation activation, const Tensor& dy, const Tensor& saved) {
  switch (activation) {
    case Activation::none:
      return dy;
    case Activation::relu:
      return relu_backward(dy, saved);
    case Activation::gelu:
      return gelu_backward(dy, saved);
    case Activation::gelu_tanh:
      return gelu_tanh_backward(dy, saved);
    case Activation::silu:
      return silu_backward(dy, saved);
  }
  return dy;
}

}  // namespace tandem::kernels
