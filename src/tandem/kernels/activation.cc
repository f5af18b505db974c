#include "tandem/kernels/activation.h"

#include <cmath>
#include <numbers>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/float_io.h"

namespace tandem::kernels {
namespace {

using detail::dispatch_floating;
using detail::from_f32;
using detail::kPointwiseGrain;
using detail::to_f32;

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) {
    TANDEM_THROW(ShapeError, op, ": operands differ: ", a.to_string(), " and ", b.to_string());
  }
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
      for (int64_t i = begin; i < end; ++i) o[i] = from_f32<T>(f(to_f32(in[i])));
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
      for (int64_t i = begin; i < end; ++i) o[i] = from_f32<T>(f(to_f32(pa[i]), to_f32(pb[i])));
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
  }
  return "invalid";
}

Activation parse_activation(std::string_view name) {
  if (name == "none" || name.empty()) return Activation::none;
  if (name == "relu") return Activation::relu;
  if (name == "gelu") return Activation::gelu;
  TANDEM_THROW(InvalidArgument, "unknown activation '", name, "' (expected none, relu or gelu)");
}

Tensor relu(const Tensor& x) {
  return map_unary(x, "relu", [](float v) { return v > 0.0f ? v : 0.0f; });
}

Tensor relu_backward(const Tensor& dy, const Tensor& y) {
  return map_binary(dy, y, "relu_backward", [](float g, float v) { return v > 0.0f ? g : 0.0f; });
}

Tensor gelu(const Tensor& x) {
  return map_unary(x, "gelu", [](float v) { return 0.5f * v * (1.0f + std::erf(v * kInvSqrt2)); });
}

Tensor gelu_backward(const Tensor& dy, const Tensor& x) {
  return map_binary(dy, x, "gelu_backward", [](float g, float v) {
    const float cdf = 0.5f * (1.0f + std::erf(v * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * std::exp(-0.5f * v * v);
    return g * (cdf + v * pdf);
  });
}

Tensor activation_backward(Activation activation, const Tensor& dy, const Tensor& saved) {
  switch (activation) {
    case Activation::none:
      return dy;
    case Activation::relu:
      return relu_backward(dy, saved);
    case Activation::gelu:
      return gelu_backward(dy, saved);
  }
  return dy;
}

}  // namespace tandem::kernels
