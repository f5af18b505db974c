#include "tandem/kernels/detail/layer_norm_rows.h"

#include <immintrin.h>

#include <cmath>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/kernels/detail/float_io.h"
#include "tandem/kernels/detail/row_blocks.h"

namespace tandem::kernels::detail {
namespace {

template <typename T>
TANDEM_AVX512 void forward_rows(const T* x, T* y, int64_t C, const float* g, const float* b,
                                float eps, float* mean, float* rstd, int64_t begin, int64_t end) {
  const float inverse_c = 1.0f / static_cast<float>(C);
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    __m512 sum = _mm512_setzero_ps();
    for (int64_t c = 0; c < C; c += 16) sum = _mm512_add_ps(sum, load16(xr + c));
    const float m = _mm512_reduce_add_ps(sum) * inverse_c;
    const __m512 mv = splat(m);
    __m512 squares = _mm512_setzero_ps();
    for (int64_t c = 0; c < C; c += 16) {
      const __m512 d = _mm512_sub_ps(load16(xr + c), mv);
      squares = _mm512_fmadd_ps(d, d, squares);
    }
    const float s = 1.0f / std::sqrt(_mm512_reduce_add_ps(squares) * inverse_c + eps);
    const __m512 sv = splat(s);
    for (int64_t c = 0; c < C; c += 16) {
      const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load16(xr + c), mv), sv);
      store16(yr + c, _mm512_fmadd_ps(xhat, _mm512_loadu_ps(g + c), _mm512_loadu_ps(b + c)));
    }
    mean[r] = m;
    rstd[r] = s;
  }
}

// Rows [begin, end): dx, and each row's dy xhat and dy added to dgamma and
// dbeta (C doubles each), as the portable rows add them.
template <typename T>
TANDEM_AVX512 void backward_rows(const T* x, const T* dy, T* dx, int64_t C, const float* g,
                                 const float* mean, const float* rstd, double* dgamma,
                                 double* dbeta, int64_t begin, int64_t end) {
  const float inverse_c = 1.0f / static_cast<float>(C);
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + r * C;
    const T* dyr = dy + r * C;
    T* dxr = dx + r * C;
    const __m512 m = splat(mean[r]), s = splat(rstd[r]);
    __m512 sum_g = _mm512_setzero_ps(), sum_gx = _mm512_setzero_ps();
    for (int64_t c = 0; c < C; c += 16) {
      const __m512 dxhat = _mm512_mul_ps(load16(dyr + c), _mm512_loadu_ps(g + c));
      const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load16(xr + c), m), s);
      sum_g = _mm512_add_ps(sum_g, dxhat);
      sum_gx = _mm512_fmadd_ps(dxhat, xhat, sum_gx);
    }
    const __m512 mean_g = splat(_mm512_reduce_add_ps(sum_g) * inverse_c);
    const __m512 mean_gx = splat(_mm512_reduce_add_ps(sum_gx) * inverse_c);
    for (int64_t c = 0; c < C; c += 16) {
      const __m512 gy = load16(dyr + c);
      const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load16(xr + c), m), s);
      const __m512 dxhat = _mm512_mul_ps(gy, _mm512_loadu_ps(g + c));
      store16(dxr + c, _mm512_mul_ps(s, _mm512_sub_ps(_mm512_sub_ps(dxhat, mean_g),
                                                      _mm512_mul_ps(xhat, mean_gx))));
      accumulate16(dgamma + c, _mm512_mul_ps(gy, xhat));
      accumulate16(dbeta + c, gy);
    }
  }
}

}  // namespace

bool layer_norm_rows_apply(const Tensor& x) {
  return x.device().kind == DeviceKind::cpu &&
         (x.dtype() == DType::f32 || x.dtype() == DType::bf16) && x.rank() >= 1 &&
         x.dim(-1) % 16 == 0 && has_avx512f();
}

void layer_norm_rows(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                     NormResult& result) {
  const int64_t C = x.dim(-1), R = C == 0 ? 0 : x.numel() / C;
  const float* g = gamma.data<float>();
  const float* b = beta.data<float>();
  float* mean = result.mean.data<float>();
  float* rstd = result.rstd.data<float>();
  dispatch_f32_or_bf16(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.raw_data());
    T* out = static_cast<T*>(result.y.raw_data());
    parallel_for(R, 16, [&](int64_t r0, int64_t r1) {
      forward_rows(in, out, C, g, b, eps, mean, rstd, r0, r1);
    });
  });
}

std::vector<double> layer_norm_backward_rows(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                             const Tensor& rstd, const Tensor& gamma, Tensor& dx) {
  const int64_t C = x.dim(-1), R = C == 0 ? 0 : x.numel() / C;
  const float* g = gamma.data<float>();
  const float* mu = mean.data<float>();
  const float* rs = rstd.data<float>();
  std::vector<double> sums;
  dispatch_f32_or_bf16(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x.raw_data());
    const T* gy = static_cast<const T*>(dy.raw_data());
    T* out = static_cast<T*>(dx.raw_data());
    sums = reduce_rows(R, 2 * C, [&](int64_t r, double* acc) {
      backward_rows(xs, gy, out, C, g, mu, rs, acc, acc + C, r, r + 1);
    });
  });
  return sums;
}

}  // namespace tandem::kernels::detail
