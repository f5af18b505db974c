#include "tandem/kernels/detail/gelu_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/kernels/detail/float_io.h"

namespace tandem::kernels::detail {
namespace {

// Form::value and Form::slope over Count blocks (the forms derive from it).
template <typename Form>
struct Blocks {
  template <int Count>
  TANDEM_AVX512 static void values(const __m512* x, __m512* out) {
    for (int b = 0; b < Count; ++b) out[b] = Form::value(x[b]);
  }
  template <int Count>
  TANDEM_AVX512 static void slopes(const __m512* x, __m512* out) {
    for (int b = 0; b < Count; ++b) out[b] = Form::slope(x[b]);
  }
};

// 0.5 x (1 + tanh u), u = sqrt(2 / pi) (x + 0.044715 x^3), written as x s
// with s = 0.5 (1 + tanh u) = 1 / (1 + e^(-2u)): one exponential, and
// e^(-2u) = infinity gives s = 0 exactly, as tanh's -1 does.
struct TanhForm : Blocks<TanhForm> {
  static constexpr float kScale = 0.7978845608028654f;  // sqrt(2 / pi)
  static constexpr float kCubic = 0.044715f;

  TANDEM_AVX512 static __m512 half_one_plus_tanh(__m512 x, __m512 x2) {
    const __m512 minus_two_u = _mm512_mul_ps(
        x, _mm512_fmadd_ps(x2, splat(-2.0f * kScale * kCubic), splat(-2.0f * kScale)));
    return _mm512_div_ps(splat(1.0f), _mm512_add_ps(splat(1.0f), exp16(minus_two_u)));
  }
  TANDEM_AVX512 static __m512 value(__m512 x) {
    return _mm512_mul_ps(x, half_one_plus_tanh(x, _mm512_mul_ps(x, x)));
  }
  // s + x s (1 - s) 2u', 2u' = 2 sqrt(2 / pi) (1 + 3 0.044715 x^2).
  TANDEM_AVX512 static __m512 slope(__m512 x) {
    const __m512 x2 = _mm512_mul_ps(x, x);
    const __m512 s = half_one_plus_tanh(x, x2);
    const __m512 two_du = _mm512_fmadd_ps(x2, splat(6.0f * kScale * kCubic), splat(2.0f * kScale));
    const __m512 xs1s = _mm512_mul_ps(_mm512_mul_ps(x, s), _mm512_sub_ps(splat(1.0f), s));
    return _mm512_fmadd_ps(xs1s, two_du, s);
  }
};

// x Phi(x), Phi the normal CDF 0.5 (1 + erf(x / sqrt 2)). Phi(-|x|) =
// 0.5 erfc(z), z = |x| / sqrt 2, by Abramowitz and Stegun 7.1.26: t (a1 +
// t (a2 + ...)) e^(-z^2), t = 1 / (1 + p z), absolute error under 1.5e-7.
struct ErfForm : Blocks<ErfForm> {
  static constexpr float kInvSqrt2 = 0.70710678118654752f;
  static constexpr float kInvSqrt2Pi = 0.39894228040143268f;

  struct Cdf {
    __m512 phi;       // Phi(x)
    __m512 gaussian;  // e^(-x^2 / 2)
  };
  TANDEM_AVX512 static Cdf cdf(__m512 x) {
    const __m512 z = _mm512_mul_ps(_mm512_abs_ps(x), splat(kInvSqrt2));
    const __m512 t = _mm512_div_ps(splat(1.0f), _mm512_fmadd_ps(z, splat(0.3275911f), splat(1.0f)));
    __m512 p = splat(1.061405429f);
    p = _mm512_fmadd_ps(p, t, splat(-1.453152027f));
    p = _mm512_fmadd_ps(p, t, splat(1.421413741f));
    p = _mm512_fmadd_ps(p, t, splat(-0.284496736f));
    p = _mm512_fmadd_ps(p, t, splat(0.254829592f));
    const __m512 gaussian = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(z, z)));
    const __m512 lower = _mm512_mul_ps(_mm512_mul_ps(splat(0.5f), _mm512_mul_ps(p, t)), gaussian);
    const __mmask16 positive = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    return {_mm512_mask_sub_ps(lower, positive, splat(1.0f), lower), gaussian};
  }
  TANDEM_AVX512 static __m512 value(__m512 x) { return _mm512_mul_ps(x, cdf(x).phi); }
  // Phi(x) + x phi(x), phi the normal density.
  TANDEM_AVX512 static __m512 slope(__m512 x) {
    const Cdf c = cdf(x);
    return _mm512_fmadd_ps(_mm512_mul_ps(x, c.gaussian), splat(kInvSqrt2Pi), c.phi);
  }
};

// Elements ahead of the one computed whose lines are fetched.
constexpr int64_t kPrefetchAhead = 512;

// The loops, compiled twice: on every AVX-512 CPU with bf16 results rounded
// in integer arithmetic (store16), and for CPUs with AVX512-BF16 with its
// conversion instruction, which took a tenth off the bf16 forward and a
// few percent off the backward (kernels_bench on an AMX Xeon; the math is
// what bounds them). The instruction takes
// subnormal inputs as zero, so those lanes keep the integer rounding: both
// versions give the same bits.
namespace integer_rounding {
#define TANDEM_GELU_TARGET TANDEM_AVX512
TANDEM_GELU_TARGET inline void store_result(float* p, __m512 v) {
  store16(p, v);
}
TANDEM_GELU_TARGET inline void store_result(Bf16* p, __m512 v) {
  store16(p, v);
}
#include "tandem/kernels/detail/gelu_avx512_loops.inc"
#undef TANDEM_GELU_TARGET
}  // namespace integer_rounding

namespace native_bf16 {
#define TANDEM_GELU_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
TANDEM_GELU_TARGET inline void store_result(float* p, __m512 v) {
  store16(p, v);
}
TANDEM_GELU_TARGET inline void store_result(Bf16* p, __m512 v) {
  __m256i bits = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
  // Zeros among them round to themselves either way.
  const __mmask16 subnormal =
      _mm512_cmp_ps_mask(_mm512_abs_ps(v), splat(std::numeric_limits<float>::min()), _CMP_LT_OQ);
  if (subnormal != 0) {
    bits = _mm256_mask_mov_epi16(bits, subnormal, _mm512_cvtepi32_epi16(bf16_lanes(v)));
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bits);
}
#include "tandem/kernels/detail/gelu_avx512_loops.inc"
#undef TANDEM_GELU_TARGET
}  // namespace native_bf16

// y = gelu(x) or dy gelu'(x); y may be x.
void run(Activation form, const Tensor& x, const Tensor* dy, Tensor& y, Bf16Stores stores) {
  const bool native = stores == Bf16Stores::fastest && has_avx512_bf16();
  dispatch_f32_or_bf16(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.raw_data());
    const T* grad = dy == nullptr ? nullptr : static_cast<const T*>(dy->raw_data());
    T* out = static_cast<T*>(y.raw_data());
    parallel_for(x.numel(), kPointwiseGrain, [&](int64_t begin, int64_t end) {
      const T* g = grad == nullptr ? nullptr : grad + begin;
      const bool tanh = form == Activation::gelu_tanh;
      if (std::is_same_v<T, Bf16> && native) {
        if (tanh) {
          native_bf16::gelu_run<TanhForm>(in + begin, g, out + begin, end - begin);
        } else {
          native_bf16::gelu_run<ErfForm>(in + begin, g, out + begin, end - begin);
        }
      } else if (tanh) {
        integer_rounding::gelu_run<TanhForm>(in + begin, g, out + begin, end - begin);
      } else {
        integer_rounding::gelu_run<ErfForm>(in + begin, g, out + begin, end - begin);
      }
    });
  });
}

}  // namespace

bool gelu_avx512_supported(const Tensor& x) {
  return x.device().kind == DeviceKind::cpu &&
         (x.dtype() == DType::f32 || x.dtype() == DType::bf16) && has_avx512f();
}

Tensor gelu_avx512(Activation form, const Tensor& x, Bf16Stores stores) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  run(form, x, nullptr, y, stores);
  return y;
}

Tensor gelu_backward_avx512(Activation form, const Tensor& dy, const Tensor& x, Bf16Stores stores) {
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  run(form, x, &dy, dx, stores);
  return dx;
}

bool gelu_follows_product(Activation activation, DType operands, DType out, Device device) {
  const bool floating = (operands == DType::f32 || operands == DType::bf16) &&
                        (out == DType::f32 || out == DType::bf16);
  const bool narrowed = operands == DType::f32 && out == DType::bf16;
  return (activation == Activation::gelu || activation == Activation::gelu_tanh) &&
         device.kind == DeviceKind::cpu && floating && !narrowed;
}

void gelu_in_place(Activation form, Tensor& y) {
  if (gelu_avx512_supported(y)) {
    run(form, y, nullptr, y, Bf16Stores::fastest);
  } else {
    y.copy_from(activate(form, y));
  }
}

}  // namespace tandem::kernels::detail
