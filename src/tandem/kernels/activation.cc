#include "tandem/kernels/activation.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <type_traits>

#include "tandem/base/name_table.h"
#include "tandem/base/parallel.h"
#include "tandem/base/target_clones.h"
#include "tandem/kernels/detail/checks.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/eltwise.h"
#include "tandem/kernels/detail/float_io.h"
#include "tandem/kernels/detail/gelu_avx512.h"
#include "tandem/kernels/detail/pointwise_map.h"

namespace tandem::kernels {
namespace {

using detail::map_binary;
using detail::map_unary;

constexpr float kInvSqrt2 = static_cast<float>(1.0 / std::numbers::sqrt2);
constexpr float kInvSqrt2Pi =
    static_cast<float>(1.0 / (std::numbers::sqrt2 * 1.7724538509055160273));

// "" also means none (an option left empty).
constexpr NameTable<Activation, 6> kActivations{"activation",
                                                {{{Activation::none, "none"},
                                                  {Activation::relu, "relu"},
                                                  {Activation::gelu, "gelu"},
                                                  {Activation::gelu_tanh, "gelu_tanh"},
                                                  {Activation::silu, "silu"},
                                                  {Activation::none, ""}}}};

// out[i] = value[i] where test[i] > 0, else +0 (NaN tests false): relu
// (test = value = x) and its backward (test = y, value = dy). Values move as
// their bits, so the compiler vectorises 16-bit storage as well as f32.
template <typename T>
[[gnu::always_inline]] inline void where_positive_body(const T* test, const T* value_storage,
                                                       T* out_storage, int64_t n) {
  using Bits = detail::StorageBits<T>;
  const auto* __restrict value = reinterpret_cast<const Bits*>(value_storage);
  auto* __restrict out = reinterpret_cast<Bits*>(out_storage);
  for (int64_t i = 0; i < n; ++i) {
    const auto keep = static_cast<Bits>(-static_cast<Bits>(detail::to_f32(test[i]) > 0.0f));
    out[i] = static_cast<Bits>(value[i] & keep);
  }
}

#define TANDEM_WHERE_POSITIVE(T)                                                                   \
  TANDEM_TARGET_CLONES void where_positive_run(const T* test, const T* value, T* out, int64_t n) { \
    where_positive_body(test, value, out, n);                                                      \
  }
TANDEM_WHERE_POSITIVE(float)
TANDEM_WHERE_POSITIVE(detail::Bf16)
TANDEM_WHERE_POSITIVE(detail::F16)
#undef TANDEM_WHERE_POSITIVE

Tensor where_positive(const Tensor& test, const Tensor& value, const char* op) {
  Tensor out = Tensor::empty(value.shape(), value.dtype(), value.device());
  detail::dispatch_floating(value.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* t = static_cast<const T*>(test.raw_data());
    const T* v = static_cast<const T*>(value.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(value.numel(), detail::kPointwiseGrain, [&](int64_t begin, int64_t end) {
      where_positive_run(t + begin, v + begin, o + begin, end - begin);
    });
  });
  return out;
}

}  // namespace

std::string_view activation_name(Activation activation) {
  return kActivations.name(activation);
}

Activation parse_activation(std::string_view name) {
  return kActivations.parse(name);
}

Tensor relu(const Tensor& x) {
  TANDEM_DISPATCH_CUDA(x, activate(Activation::relu, x));
  return where_positive(x, x, "relu");
}

Tensor relu_backward(const Tensor& dy, const Tensor& y) {
  detail::check_matching("relu_backward", dy, y);
  TANDEM_DISPATCH_CUDA(dy, activation_backward(Activation::relu, dy, y));
  return where_positive(y, dy, "relu_backward");
}

namespace {

// f32 and bf16 take oneDNN's vectorised primitives (GELU first tandem's own
// AVX-512 loops where the CPU has them); f16 the loops above.
bool vectorised(const Tensor& x) {
  return detail::eltwise_supported(x);
}

}  // namespace

Tensor gelu(const Tensor& x) {
  TANDEM_DISPATCH_CUDA(x, activate(Activation::gelu, x));
  if (detail::gelu_avx512_supported(x)) return detail::gelu_avx512(Activation::gelu, x);
  if (vectorised(x)) return detail::eltwise_forward(Activation::gelu, x);
  return map_unary(x, "gelu", [](float v) { return 0.5f * v * (1.0f + std::erf(v * kInvSqrt2)); });
}

Tensor gelu_backward(const Tensor& dy, const Tensor& x) {
  detail::check_matching("gelu_backward", dy, x);
  TANDEM_DISPATCH_CUDA(dy, activation_backward(Activation::gelu, dy, x));
  if (detail::gelu_avx512_supported(x))
    return detail::gelu_backward_avx512(Activation::gelu, dy, x);
  if (vectorised(x)) return detail::eltwise_backward(Activation::gelu, dy, x);
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
  if (detail::gelu_avx512_supported(x)) return detail::gelu_avx512(Activation::gelu_tanh, x);
  if (vectorised(x)) return detail::eltwise_forward(Activation::gelu_tanh, x);
  return map_unary(x, "gelu_tanh", [](float v) {
    return 0.5f * v * (1.0f + std::tanh(kTanhScale * (v + kTanhCubic * v * v * v)));
  });
}

Tensor gelu_tanh_backward(const Tensor& dy, const Tensor& x) {
  detail::check_matching("gelu_tanh_backward", dy, x);
  TANDEM_DISPATCH_CUDA(dy, activation_backward(Activation::gelu_tanh, dy, x));
  if (detail::gelu_avx512_supported(x)) {
    return detail::gelu_backward_avx512(Activation::gelu_tanh, dy, x);
  }
  if (vectorised(x)) return detail::eltwise_backward(Activation::gelu_tanh, dy, x);
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
  detail::check_matching("silu_backward", dy, x);
  TANDEM_DISPATCH_CUDA(dy, activation_backward(Activation::silu, dy, x));
  if (vectorised(x)) return detail::eltwise_backward(Activation::silu, dy, x);
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
