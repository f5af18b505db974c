// Batch normalisation's training mode on AVX-512, rows of C channels with C
// a multiple of 16, f32 or bf16 storage read and written directly,
// computed in f32 (see batch_norm.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/kernels/detail/batch_norm.h"

namespace tandem::kernels::detail {
namespace {

// Rows per block: about 512 values, summed in f32 (each block's sums go
// on in double, in block order, whatever the thread count).
int64_t block_rows(int64_t C) {
  return std::max<int64_t>(1, 512 / C);
}

// The ReLU mask's 16 bytes as a lane mask.
TANDEM_AVX512 inline __mmask16 load_mask(const uint8_t* p) {
  const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm512_test_epi32_mask(bytes, bytes);
}

// sums[c] += x[r][c] (squares: += (x[r][c] - mean[c])^2) over `rows` rows.
template <typename T>
TANDEM_AVX512 void channel_sums(const T* x, int64_t rows, int64_t C, const float* mean,
                                float* sums) {
  for (int64_t c = 0; c < C; c += 16) {
    __m512 acc = _mm512_loadu_ps(sums + c);
    if (mean == nullptr) {
      for (int64_t r = 0; r < rows; ++r) acc = _mm512_add_ps(acc, load16(x + r * C + c));
    } else {
      const __m512 m = _mm512_loadu_ps(mean + c);
      for (int64_t r = 0; r < rows; ++r) {
        const __m512 d = _mm512_sub_ps(load16(x + r * C + c), m);
        acc = _mm512_fmadd_ps(d, d, acc);
      }
    }
    _mm512_storeu_ps(sums + c, acc);
  }
}

// y = x a + b; with mask: y = max(y, 0) and mask = 1 where y > 0.
template <typename T>
TANDEM_AVX512 void normalize(const T* x, int64_t rows, int64_t C, const float* a, const float* b,
                             T* y, uint8_t* mask) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < C; c += 16) {
      __m512 v =
          _mm512_fmadd_ps(load16(x + r * C + c), _mm512_loadu_ps(a + c), _mm512_loadu_ps(b + c));
      if (mask != nullptr) {
        const __mmask16 positive = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ);
        v = _mm512_maskz_mov_ps(positive, v);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(mask + r * C + c),
                         _mm512_cvtepi32_epi8(_mm512_maskz_set1_epi32(positive, 1)));
      }
      store16(y + r * C + c, v);
    }
  }
}

// The backward's per-channel sums of g and g xhat, g = dy (masked).
template <typename T>
TANDEM_AVX512 void gradient_sums(const T* x, const T* dy, const uint8_t* mask, int64_t rows,
                                 int64_t C, const float* mean, const float* rstd, float* sum_g,
                                 float* sum_gx) {
  for (int64_t c = 0; c < C; c += 16) {
    __m512 g_acc = _mm512_loadu_ps(sum_g + c), gx_acc = _mm512_loadu_ps(sum_gx + c);
    const __m512 m = _mm512_loadu_ps(mean + c), s = _mm512_loadu_ps(rstd + c);
    for (int64_t r = 0; r < rows; ++r) {
      __m512 g = load16(dy + r * C + c);
      if (mask != nullptr) g = _mm512_maskz_mov_ps(load_mask(mask + r * C + c), g);
      const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load16(x + r * C + c), m), s);
      g_acc = _mm512_add_ps(g_acc, g);
      gx_acc = _mm512_fmadd_ps(g, xhat, gx_acc);
    }
    _mm512_storeu_ps(sum_g + c, g_acc);
    _mm512_storeu_ps(sum_gx + c, gx_acc);
  }
}

// dx = scale (g - mean_g - xhat mean_gx).
template <typename T>
TANDEM_AVX512 void input_gradient(const T* x, const T* dy, const uint8_t* mask, int64_t rows,
                                  int64_t C, const float* mean, const float* rstd,
                                  const float* scale, const float* mean_g, const float* mean_gx,
                                  T* dx) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < C; c += 16) {
      __m512 g = load16(dy + r * C + c);
      if (mask != nullptr) g = _mm512_maskz_mov_ps(load_mask(mask + r * C + c), g);
      const __m512 xhat =
          _mm512_mul_ps(_mm512_sub_ps(load16(x + r * C + c), _mm512_loadu_ps(mean + c)),
                        _mm512_loadu_ps(rstd + c));
      const __m512 inner = _mm512_sub_ps(_mm512_sub_ps(g, _mm512_loadu_ps(mean_g + c)),
                                         _mm512_mul_ps(xhat, _mm512_loadu_ps(mean_gx + c)));
      store16(dx + r * C + c, _mm512_mul_ps(_mm512_loadu_ps(scale + c), inner));
    }
  }
}

// Per-channel sums of `width` floats over blocks of rows: add(r0, rows,
// sums) adds rows [r0, r0 + rows) into sums (zeroed f32); blocks' sums are
// added in double, in block order.
template <typename Add>
std::vector<double> sum_blocks(int64_t R, int64_t C, int64_t width, Add add) {
  const int64_t per_block = block_rows(C);
  const int64_t blocks = (R + per_block - 1) / per_block;
  std::vector<double> partial(static_cast<size_t>(blocks * width));
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> sums(static_cast<size_t>(width));
    for (int64_t b = b0; b < b1; ++b) {
      std::fill(sums.begin(), sums.end(), 0.0f);
      add(b * per_block, std::min(per_block, R - b * per_block), sums.data());
      std::copy(sums.begin(), sums.end(), partial.begin() + b * width);
    }
  });
  std::vector<double> total(static_cast<size_t>(width), 0.0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t i = 0; i < width; ++i) total[i] += partial[b * width + i];
  return total;
}

// body(r0, rows) over blocks of rows, in parallel.
template <typename Body>
void for_blocks(int64_t R, int64_t C, Body body) {
  const int64_t per_block = block_rows(C);
  parallel_for((R + per_block - 1) / per_block, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) body(b * per_block, std::min(per_block, R - b * per_block));
  });
}

Tensor channel_tensor(const std::vector<float>& values, const Tensor& like) {
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(values.size())}, DType::f32, like.device());
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

}  // namespace

bool batch_norm_rows_apply(const Tensor& x) {
  return has_avx512f() && (x.dtype() == DType::f32 || x.dtype() == DType::bf16) &&
         x.dim(-1) % 16 == 0;
}

BatchNormForward batch_norm_rows_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                          float eps, bool relu) {
  const int64_t C = x.dim(-1), R = x.numel() / C;
  BatchNormForward result{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor(), Tensor(),
                          relu ? Tensor::empty(x.shape(), DType::u8, x.device()) : Tensor()};
  dispatch_f32_or_bf16(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x.raw_data());
    const std::vector<double> sums = sum_blocks(R, C, C, [&](int64_t r0, int64_t rows, float* s) {
      channel_sums(xs + r0 * C, rows, C, nullptr, s);
    });
    std::vector<float> mean(static_cast<size_t>(C)), variance(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) mean[c] = static_cast<float>(sums[c] / static_cast<double>(R));
    const std::vector<double> squares =
        sum_blocks(R, C, C, [&](int64_t r0, int64_t rows, float* s) {
          channel_sums(xs + r0 * C, rows, C, mean.data(), s);
        });
    std::vector<float> a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      variance[c] = static_cast<float>(squares[c] / static_cast<double>(R));
      a[c] = static_cast<float>(gamma.data<float>()[c] /
                                std::sqrt(static_cast<double>(variance[c]) + eps));
      b[c] = beta.data<float>()[c] - mean[c] * a[c];
    }
    T* ys = static_cast<T*>(result.y.raw_data());
    uint8_t* mask = relu ? result.relu_mask.data<uint8_t>() : nullptr;
    for_blocks(R, C, [&](int64_t r0, int64_t rows) {
      normalize(xs + r0 * C, rows, C, a.data(), b.data(), ys + r0 * C,
                mask == nullptr ? nullptr : mask + r0 * C);
    });
    result.mean = channel_tensor(mean, x);
    result.variance = channel_tensor(variance, x);
  });
  return result;
}

NormGrads batch_norm_rows_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                   const Tensor& variance, const Tensor& gamma, float eps,
                                   const Tensor& relu_mask) {
  const int64_t C = x.dim(-1), R = x.numel() / C;
  if (relu_mask.defined() && (relu_mask.dtype() != DType::u8 || relu_mask.shape() != x.shape())) {
    TANDEM_THROW(ShapeError, "batch_norm_backward: the ReLU mask must be u8 of x's shape ",
                 x.shape().to_string(), " (from batch_norm_train), got ", relu_mask.to_string());
  }
  const Tensor rstd_values = inverse_std(variance, eps);
  const float* rstd = rstd_values.data<float>();
  const float* mu = mean.data<float>();
  const uint8_t* mask = relu_mask.defined() ? relu_mask.data<uint8_t>() : nullptr;
  NormGrads grads{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor(), Tensor()};
  dispatch_f32_or_bf16(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x.raw_data());
    const T* gs = static_cast<const T*>(dy.raw_data());
    const std::vector<double> sums =
        sum_blocks(R, C, 2 * C, [&](int64_t r0, int64_t rows, float* s) {
          gradient_sums(xs + r0 * C, gs + r0 * C, mask == nullptr ? nullptr : mask + r0 * C, rows,
                        C, mu, rstd, s, s + C);
        });
    std::vector<float> dgamma(static_cast<size_t>(C)), dbeta(static_cast<size_t>(C));
    std::vector<float> scale(static_cast<size_t>(C)), mean_g(static_cast<size_t>(C)),
        mean_gx(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      dbeta[c] = static_cast<float>(sums[c]);
      dgamma[c] = static_cast<float>(sums[C + c]);
      scale[c] = gamma.data<float>()[c] * rstd[c];
      mean_g[c] = static_cast<float>(sums[c] / static_cast<double>(R));
      mean_gx[c] = static_cast<float>(sums[C + c] / static_cast<double>(R));
    }
    T* dxs = static_cast<T*>(grads.dx.raw_data());
    for_blocks(R, C, [&](int64_t r0, int64_t rows) {
      input_gradient(xs + r0 * C, gs + r0 * C, mask == nullptr ? nullptr : mask + r0 * C, rows, C,
                     mu, rstd, scale.data(), mean_g.data(), mean_gx.data(), dxs + r0 * C);
    });
    grads.dgamma = channel_tensor(dgamma, x);
    grads.dbeta = channel_tensor(dbeta, x);
  });
  return grads;
}

}  // namespace tandem::kernels::detail
