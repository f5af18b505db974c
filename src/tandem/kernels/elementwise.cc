#include "tandem/kernels/elementwise.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>

#include "tandem/base/parallel.h"
#include "tandem/base/target_clones.h"
#include "tandem/kernels/activation.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/kernels/detail/checks.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/float_io.h"

namespace tandem::kernels {
namespace {

using detail::dispatch_floating;
using detail::from_f32;
using detail::kPointwiseGrain;
using detail::to_f32;

enum class Binary { add, mul };

template <Binary op, typename T>
[[gnu::always_inline]] inline void binary_run_body(const T* __restrict x, const T* __restrict y,
                                                   T* __restrict z, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    const float a = to_f32(x[k]), b = to_f32(y[k]);
    z[k] = from_f32<T>(op == Binary::add ? a + b : a * b);
  }
}

// z = x op y over n elements, cloned per ISA for each storage type.
#define TANDEM_BINARY_LOOP(T)                                                                 \
  TANDEM_TARGET_CLONES void binary_loop(Binary op, const T* x, const T* y, T* z, int64_t n) { \
    if (op == Binary::add) {                                                                  \
      binary_run_body<Binary::add>(x, y, z, n);                                               \
    } else {                                                                                  \
      binary_run_body<Binary::mul>(x, y, z, n);                                               \
    }                                                                                         \
  }
TANDEM_BINARY_LOOP(float)
TANDEM_BINARY_LOOP(detail::Bf16)
TANDEM_BINARY_LOOP(detail::F16)
#undef TANDEM_BINARY_LOOP

// bf16 on AVX-512, 32 at a time (the results converted and stored in
// pairs) then 16 (GCC leaves binary_loop's Bf16 version scalar: a residual
// add was 8% of resnet's bf16 step); returns the elements done, a multiple
// of 16.
TANDEM_AVX512 inline __m512 binary_lanes(Binary op, const detail::Bf16* x, const detail::Bf16* y) {
  const __m512 a = detail::load16(x), b = detail::load16(y);
  return op == Binary::add ? _mm512_add_ps(a, b) : _mm512_mul_ps(a, b);
}

TANDEM_AVX512 int64_t binary_bf16_avx512(Binary op, const detail::Bf16* x, const detail::Bf16* y,
                                         detail::Bf16* z, int64_t n) {
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    const __m512 lo = binary_lanes(op, x + k, y + k);
    detail::store32(z + k, lo, binary_lanes(op, x + k + 16, y + k + 16));
  }
  if (k + 16 <= n) {
    detail::store16(z + k, binary_lanes(op, x + k, y + k));
    k += 16;
  }
  return k;
}

// max(x + y, 0) on AVX-512, in pairs as above; the tail as relu(add())
// rounds it: the sum rounded to T, +0 unless it is above zero.
template <typename T>
TANDEM_AVX512 inline __m512 add_relu_lanes(const T* x, const T* y) {
  const __m512 v = _mm512_add_ps(detail::load16(x), detail::load16(y));
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v);
}

template <typename T>
TANDEM_AVX512 void add_relu_avx512(const T* x, const T* y, T* z, int64_t n) {
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    const __m512 lo = add_relu_lanes(x + k, y + k);
    detail::store32(z + k, lo, add_relu_lanes(x + k + 16, y + k + 16));
  }
  for (; k + 16 <= n; k += 16) detail::store16(z + k, add_relu_lanes(x + k, y + k));
  for (; k < n; ++k) {
    const float v = detail::to_f32(x[k]) + detail::to_f32(y[k]);
    z[k] = detail::from_f32<T>(v > 0.0f ? v : 0.0f);
  }
}

// d += s elementwise, rounded once to T (add()'s arithmetic; d and s may
// not overlap unless equal). binary_loop takes restrict pointers, so the
// scalar part has its own loop.
#define TANDEM_ADD_IN_PLACE_LOOP(T)                                                  \
  TANDEM_TARGET_CLONES void add_in_place_loop(T* d, const T* s, int64_t n) {         \
    for (int64_t k = 0; k < n; ++k) d[k] = from_f32<T>(to_f32(d[k]) + to_f32(s[k])); \
  }
TANDEM_ADD_IN_PLACE_LOOP(float)
TANDEM_ADD_IN_PLACE_LOOP(detail::Bf16)
TANDEM_ADD_IN_PLACE_LOOP(detail::F16)
#undef TANDEM_ADD_IN_PLACE_LOOP

template <typename T>
void add_in_place(T* d, const T* s, int64_t n) {
  if constexpr (std::is_same_v<T, detail::Bf16>) {
    if (detail::has_avx512()) {
      // Each lane reads its own d before writing it: in place is safe.
      const int64_t done = binary_bf16_avx512(Binary::add, d, s, d, n);
      d += done;
      s += done;
      n -= done;
    }
  }
  add_in_place_loop(d, s, n);
}

template <typename T>
void binary_run(Binary op, const T* x, const T* y, T* z, int64_t n) {
  if constexpr (std::is_same_v<T, detail::Bf16>) {
    if (detail::has_avx512()) {
      const int64_t done = binary_bf16_avx512(op, x, y, z, n);
      x += done;
      y += done;
      z += done;
      n -= done;
    }
  }
  binary_loop(op, x, y, z, n);
}

// a op b, b broadcast onto a; checked by check_binary.
Tensor broadcast_binary(const Tensor& a, const Tensor& b, const char* name, Binary op) {
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  const int64_t n = a.numel();
  const int64_t period = b.numel();  // b repeats every `period` elements of a
  dispatch_floating(a.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a.raw_data());
    const T* pb = static_cast<const T*>(b.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(n, kPointwiseGrain, [&](int64_t begin, int64_t end) {
      // b's repeats one run at a time: a contiguous loop, no index modulo.
      for (int64_t i = begin; i < end;) {
        const int64_t j = i % period;
        const int64_t run = std::min(end - i, period - j);
        binary_run(op, pa + i, pb + j, o + i, run);
        i += run;
      }
    });
  });
  return out;
}

void check_binary(const Tensor& a, const Tensor& b, const char* name) {
  detail::check_same_device(name, a, {&b});
  if (a.dtype() != b.dtype() || !broadcastable(a.shape(), b.shape())) {
    TANDEM_THROW(ShapeError, name, ": cannot combine ", a.to_string(), " with ", b.to_string(),
                 " (b must match a's dtype and have a's shape, its trailing dimensions, or one "
                 "element)");
  }
}

}  // namespace

bool broadcastable(const Shape& a, const Shape& b) {
  if (b.numel() == 1) return true;
  if (b.rank() > a.rank()) return false;
  for (int i = 1; i <= b.rank(); ++i) {
    if (a[a.rank() - i] != b[b.rank() - i]) return false;
  }
  return true;
}

Tensor add(const Tensor& a, const Tensor& b) {
  check_binary(a, b, "add");
  TANDEM_DISPATCH_CUDA(a, add(a, b));
  return broadcast_binary(a, b, "add", Binary::add);
}

Tensor add_relu(const Tensor& a, const Tensor& b) {
  detail::check_matching("add_relu", a, b);
  if (a.device().kind != DeviceKind::cpu || !detail::has_avx512() ||
      (a.dtype() != DType::f32 && a.dtype() != DType::bf16)) {
    return relu(add(a, b));
  }
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  detail::dispatch_f32_or_bf16(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(a.raw_data());
    const T* y = static_cast<const T*>(b.raw_data());
    T* z = static_cast<T*>(out.raw_data());
    parallel_for(a.numel(), kPointwiseGrain, [&](int64_t begin, int64_t end) {
      add_relu_avx512(x + begin, y + begin, z + begin, end - begin);
    });
  });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  check_binary(a, b, "mul");
  TANDEM_DISPATCH_CUDA(a, mul(a, b));
  return broadcast_binary(a, b, "mul", Binary::mul);
}

Tensor scale(const Tensor& a, float factor) {
  TANDEM_DISPATCH_CUDA(a, scale(a, factor));
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  dispatch_floating(a.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(a.numel(), kPointwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = from_f32<T>(to_f32(pa[i]) * factor);
    });
  });
  return out;
}

void add_into(Tensor& dst, const Tensor& src, float alpha) {
  detail::check_same_device("add_into", dst, {&src});
  if (dst.numel() != src.numel()) {
    TANDEM_THROW(ShapeError, "add_into: ", dst.to_string(), " and ", src.to_string(),
                 " differ in element count");
  }
  TANDEM_DISPATCH_CUDA(dst, add_into(dst, src, alpha));
  if (alpha == 1.0f && dst.dtype() == src.dtype()) {
    // add()'s vector loops, in place: the same bits as the loop below.
    dispatch_floating(dst.dtype(), "add_into", [&](auto tag) {
      using T = decltype(tag);
      T* d = static_cast<T*>(dst.raw_data());
      const T* s = static_cast<const T*>(src.raw_data());
      parallel_for(dst.numel(), kPointwiseGrain, [&](int64_t begin, int64_t end) {
        add_in_place(d + begin, s + begin, end - begin);
      });
    });
    return;
  }
  dispatch_floating(dst.dtype(), "add_into", [&](auto dst_tag) {
    using D = decltype(dst_tag);
    D* d = static_cast<D*>(dst.raw_data());
    dispatch_floating(src.dtype(), "add_into", [&](auto src_tag) {
      using S = decltype(src_tag);
      const S* s = static_cast<const S*>(src.raw_data());
      parallel_for(dst.numel(), kPointwiseGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
          d[i] = from_f32<D>(to_f32(d[i]) + alpha * to_f32(s[i]));
      });
    });
  });
}

bool scale_and_check_finite(const std::vector<Tensor>& tensors, float factor) {
  for (const Tensor& t : tensors) {
    if (t.dtype() != DType::f32) {
      TANDEM_THROW(InvalidArgument, "scale_and_check_finite needs f32 tensors, got ",
                   t.to_string());
    }
    detail::check_same_device("scale_and_check_finite", tensors.front(), {&t});
  }
  if (tensors.empty()) return true;
  TANDEM_DISPATCH_CUDA(tensors.front(), scale_and_check_finite(tensors, factor));
  bool finite = true;
  for (const Tensor& t : tensors) {
    float* data = t.data<float>();
    std::atomic<bool> ok{true};
    parallel_for(t.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
      // Scale and test in one pass: testing the product is testing the
      // gradient when scaled down (factor <= 1); a scale below 1 (factor > 1)
      // also counts a gradient the unscaling takes past f32's range as
      // non-finite, which the update could not use either.
      bool chunk_ok = true;
      for (int64_t i = begin; i < end; ++i) {
        data[i] *= factor;
        chunk_ok &= std::isfinite(data[i]);
      }
      if (!chunk_ok) ok.store(false, std::memory_order_relaxed);
    });
    finite &= ok.load();
  }
  return finite;
}

}  // namespace tandem::kernels
