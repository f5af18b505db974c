#include "tandem/kernels/detail/gelu_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <vector>

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

// The computed loops (f32, and bf16 on Bf16Path::computed and for the
// tables), bf16 results rounded by store16.

// One block of 16: y = Form::value(x) (dy null) or y = dy Form::slope(x).
template <typename Form, typename T>
TANDEM_AVX512 inline void gelu_block(const T* x, const T* dy, T* y) {
  const __m512 v = load16(x);
  store16(y, dy == nullptr ? Form::value(v) : _mm512_mul_ps(load16(dy), Form::slope(v)));
}

// Count blocks of 16 side by side: independent chains of the math that the
// scheduler interleaves.
template <typename Form, int Count, typename T>
TANDEM_AVX512 inline void gelu_blocks(const T* x, const T* dy, T* y) {
  __m512 v[Count], out[Count];
  for (int b = 0; b < Count; ++b) v[b] = load16(x + 16 * b);
  if (dy == nullptr) {
    Form::template values<Count>(v, out);
  } else {
    Form::template slopes<Count>(v, out);
    for (int b = 0; b < Count; ++b) out[b] = _mm512_mul_ps(load16(dy + 16 * b), out[b]);
  }
  for (int b = 0; b < Count; ++b) store16(y + 16 * b, out[b]);
}

// gelu_block over n elements; the last partial block through a zero-padded
// copy.
template <typename Form, typename T>
TANDEM_AVX512 void gelu_run(const T* x, const T* dy, T* y, int64_t n) {
  int64_t i = 0;
  // Four blocks side by side: each block's math is one chain of about 25
  // dependent operations, and one block at a time filled the scheduler
  // with waiting operations (about 28 cycles a block, not the 10 its
  // operations need).
  for (; i + 64 <= n; i += 64) {
    for (size_t line = 0; line < 64 * sizeof(T); line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(x + i + kPrefetchAhead) + line, _MM_HINT_T0);
      if (dy != nullptr) {
        _mm_prefetch(reinterpret_cast<const char*>(dy + i + kPrefetchAhead) + line, _MM_HINT_T0);
      }
    }
    gelu_blocks<Form, 4>(x + i, dy == nullptr ? nullptr : dy + i, y + i);
  }
  for (; i + 16 <= n; i += 16) {
    // The math's long dependency chains keep the out-of-order window from
    // reaching the next loads: without prefetches, a tensor past the caches
    // (gpt's 16,384 x 1,024 hidden layer) ran at a third of the in-cache
    // rate.
    _mm_prefetch(reinterpret_cast<const char*>(x + i + kPrefetchAhead), _MM_HINT_T0);
    if (dy != nullptr) {
      _mm_prefetch(reinterpret_cast<const char*>(dy + i + kPrefetchAhead), _MM_HINT_T0);
    }
    gelu_block<Form>(x + i, dy == nullptr ? nullptr : dy + i, y + i);
  }
  if (i == n) return;
  T xs[16] = {}, dys[16] = {}, ys[16];
  std::copy(x + i, x + n, xs);
  if (dy != nullptr) std::copy(dy + i, dy + n, dys);
  gelu_block<Form>(xs, dy == nullptr ? nullptr : dys, ys);
  std::copy(ys, ys + (n - i), y + i);
}

// A bf16 input is one of 65,536 values: each form's results for all of
// them, computed once by the loops above, so that a lookup gives the bits
// the computation gives.
struct Bf16Tables {
  std::vector<uint16_t> values;  // gelu(x)'s bits; the gathers read 4 bytes, so 2 spare
  std::vector<float> slopes;     // gelu'(x) in f32, which the backward multiplies dy by
};

// bf16 x through the form's tables (Bf16Tables): y = the tabulated gelu(x)
// (dy null) or dy times the tabulated gelu'(x), rounded as gelu_block
// rounds (store16: with AVX512-BF16's conversion where the CPU has it, the
// same bits); the last partial block through a zero-padded copy.
TANDEM_AVX512 inline void gelu_lookup_block(const Bf16Tables& tables, const Bf16* x, const Bf16* dy,
                                            Bf16* y) {
  const __m512i index =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  if (dy == nullptr) {
    const __m512i bits = _mm512_i32gather_epi32(index, tables.values.data(), 2);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), _mm512_cvtepi32_epi16(bits));
    return;
  }
  store16(y, _mm512_mul_ps(load16(dy), _mm512_i32gather_ps(index, tables.slopes.data(), 4)));
}

TANDEM_AVX512 void gelu_lookup_run(const Bf16Tables& tables, const Bf16* x, const Bf16* dy, Bf16* y,
                                   int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    gelu_lookup_block(tables, x + i, dy == nullptr ? nullptr : dy + i, y + i);
  if (i == n) return;
  Bf16 xs[16] = {}, dys[16] = {}, ys[16];
  std::copy(x + i, x + n, xs);
  if (dy != nullptr) std::copy(dy + i, dy + n, dys);
  gelu_lookup_block(tables, xs, dy == nullptr ? nullptr : dys, ys);
  std::copy(ys, ys + (n - i), y + i);
}

template <typename Form>
TANDEM_AVX512 Bf16Tables tabulate() {
  Bf16Tables t;
  std::vector<Bf16> inputs(65536);
  for (uint32_t bits = 0; bits < 65536; ++bits) inputs[bits].bits = static_cast<uint16_t>(bits);
  t.values.resize(65536 + 2);
  gelu_run<Form>(inputs.data(), static_cast<const Bf16*>(nullptr),
                 reinterpret_cast<Bf16*>(t.values.data()), 65536);
  t.slopes.resize(65536);
  for (int64_t i = 0; i < 65536; i += 16)
    _mm512_storeu_ps(t.slopes.data() + i, Form::slope(load16(inputs.data() + i)));
  return t;
}

template <typename Form>
const Bf16Tables& bf16_tables() {
  static const Bf16Tables tables = tabulate<Form>();
  return tables;
}

// A bf16 run of gelu_lookup_run, with the tables of the form.
void lookup(Activation form, const Bf16* x, const Bf16* dy, Bf16* y, int64_t n) {
  const Bf16Tables& t =
      form == Activation::gelu_tanh ? bf16_tables<TanhForm>() : bf16_tables<ErfForm>();
  gelu_lookup_run(t, x, dy, y, n);
}

// y = gelu(x) or dy gelu'(x); y may be x.
void run(Activation form, const Tensor& x, const Tensor* dy, Tensor& y, Bf16Path path) {
  const bool tabulated = x.dtype() == DType::bf16 && path == Bf16Path::fastest;
  dispatch_f32_or_bf16(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.raw_data());
    const T* grad = dy == nullptr ? nullptr : static_cast<const T*>(dy->raw_data());
    T* out = static_cast<T*>(y.raw_data());
    parallel_for(x.numel(), kPointwiseGrain, [&](int64_t begin, int64_t end) {
      const T* g = grad == nullptr ? nullptr : grad + begin;
      if constexpr (std::is_same_v<T, Bf16>) {
        if (tabulated) return lookup(form, in + begin, g, out + begin, end - begin);
      }
      if (form == Activation::gelu_tanh) {
        gelu_run<TanhForm>(in + begin, g, out + begin, end - begin);
      } else {
        gelu_run<ErfForm>(in + begin, g, out + begin, end - begin);
      }
    });
  });
}

}  // namespace

bool gelu_avx512_supported(const Tensor& x) {
  return x.device().kind == DeviceKind::cpu &&
         (x.dtype() == DType::f32 || x.dtype() == DType::bf16) && has_avx512();
}

Tensor gelu_avx512(Activation form, const Tensor& x, Bf16Path path) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  run(form, x, nullptr, y, path);
  return y;
}

Tensor gelu_backward_avx512(Activation form, const Tensor& dy, const Tensor& x, Bf16Path path) {
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  run(form, x, &dy, dx, path);
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
    run(form, y, nullptr, y, Bf16Path::fastest);
  } else {
    y.copy_from(activate(form, y));
  }
}

}  // namespace tandem::kernels::detail
