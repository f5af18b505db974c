#include "tandem/kernels/detail/layer_norm_rows.h"

#include <immintrin.h>

#include <cmath>
#include <type_traits>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/kernels/detail/float_io.h"
#include "tandem/kernels/detail/row_blocks.h"

namespace tandem::kernels::detail {
namespace {

// Rows r0 .. r0 + Rows side by side: a row's sums, reductions and square
// root are one chain of about 200 cycles that the out-of-order window did
// not overlap with the next row's (as attention's rows). Each row's
// operations are the same, in the same order, as one at a time.
//
// GCC 12 warns that _mm512_reduce_add_ps's own _mm256_undefined_pd() is used
// uninitialized when several are inlined side by side (a false positive:
// the undefined half is never read).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

template <int Rows, typename T>
TANDEM_AVX512 void forward_rows(const T* x, T* y, int64_t C, const float* g, const float* b,
                                float eps, float* mean, float* rstd, int64_t r0) {
  const float inverse_c = 1.0f / static_cast<float>(C);
  __m512 sum[Rows], squares[Rows], mv[Rows], sv[Rows];
  for (int n = 0; n < Rows; ++n) sum[n] = squares[n] = _mm512_setzero_ps();
  for (int64_t c = 0; c < C; c += 16)
    for (int n = 0; n < Rows; ++n) sum[n] = _mm512_add_ps(sum[n], load16(x + (r0 + n) * C + c));
  for (int n = 0; n < Rows; ++n) {
    mean[r0 + n] = _mm512_reduce_add_ps(sum[n]) * inverse_c;
    mv[n] = splat(mean[r0 + n]);
  }
  for (int64_t c = 0; c < C; c += 16) {
    for (int n = 0; n < Rows; ++n) {
      const __m512 d = _mm512_sub_ps(load16(x + (r0 + n) * C + c), mv[n]);
      squares[n] = _mm512_fmadd_ps(d, d, squares[n]);
    }
  }
  for (int n = 0; n < Rows; ++n) {
    rstd[r0 + n] = 1.0f / std::sqrt(_mm512_reduce_add_ps(squares[n]) * inverse_c + eps);
    sv[n] = splat(rstd[r0 + n]);
  }
  for (int64_t c = 0; c < C; c += 16) {
    const __m512 gv = _mm512_loadu_ps(g + c), bv = _mm512_loadu_ps(b + c);
    for (int n = 0; n < Rows; ++n) {
      const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load16(x + (r0 + n) * C + c), mv[n]), sv[n]);
      store16(y + (r0 + n) * C + c, _mm512_fmadd_ps(xhat, gv, bv));
    }
  }
}

#pragma GCC diagnostic pop

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

// forward_rows over [r0, r1): bf16 rows four at a time (gpt's 16,384 x 256
// layer 1.62 -> 1.23 ms), f32 rows one at a time (1.20 -> 1.41 ms four at a
// time: kernels_bench's LayerNorm rows, interleaved).
template <typename T>
void forward_rows_over(const T* x, T* y, int64_t C, const float* g, const float* b, float eps,
                       float* mean, float* rstd, int64_t r0, int64_t r1) {
  int64_t r = r0;
  if constexpr (std::is_same_v<T, Bf16>) {
    for (; r + 4 <= r1; r += 4) forward_rows<4>(x, y, C, g, b, eps, mean, rstd, r);
  }
  for (; r < r1; ++r) forward_rows<1>(x, y, C, g, b, eps, mean, rstd, r);
}

}  // namespace

bool layer_norm_rows_apply(const Tensor& x) {
  return x.device().kind == DeviceKind::cpu &&
         (x.dtype() == DType::f32 || x.dtype() == DType::bf16) && x.rank() >= 1 &&
         x.dim(-1) % 16 == 0 && has_avx512();
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
      forward_rows_over(in, out, C, g, b, eps, mean, rstd, r0, r1);
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
