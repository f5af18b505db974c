// Batch normalisation's training mode on AVX-512, rows of C channels with C
// a multiple of 16, f32 or bf16 storage read and written directly,
// computed in f32 (see batch_norm.h).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/kernels/detail/batch_norm.h"

namespace tandem::kernels::detail {
namespace {

// Rows per block: about 4,096 values, summed in f32 (each block's sums go
// on in double, in block order, whatever the thread count). A block (8 or
// 16 KiB) stays in L1 for block_moments' second read; blocks of 512 values
// made resnet's batch norm rows 15% slower (kernels_bench, AMX Xeon).
int64_t block_rows(int64_t C) {
  return std::max<int64_t>(1, 4096 / C);
}

// Per block of rows, each channel's mean m (in f32, from the block's sum)
// and the sums of d = x - m and of d^2, in one read of the block from
// memory (the second loop finds it in L1). Out: m, sum d, sum d^2 (C each).
// The deviations are small where the mean is large, so their sums keep
// the precision that a sum of x (or x^2) in f32 would lose.
template <typename T>
TANDEM_AVX512 void block_moments(const T* x, int64_t rows, int64_t C, float* out) {
  const __m512 count = _mm512_set1_ps(static_cast<float>(rows));
  for (int64_t c = 0; c < C; c += 16) {
    const T* column = x + c;
    // Two chains of rows each, so the adds' latency does not bound the loops.
    __m512 even = _mm512_setzero_ps(), odd = _mm512_setzero_ps();
    int64_t r = 0;
    for (; r + 1 < rows; r += 2) {
      even = _mm512_add_ps(even, load16(column + r * C));
      odd = _mm512_add_ps(odd, load16(column + (r + 1) * C));
    }
    if (r < rows) even = _mm512_add_ps(even, load16(column + r * C));
    const __m512 m = _mm512_div_ps(_mm512_add_ps(even, odd), count);
    __m512 d_even = _mm512_setzero_ps(), d_odd = _mm512_setzero_ps();
    __m512 sq_even = _mm512_setzero_ps(), sq_odd = _mm512_setzero_ps();
    for (r = 0; r + 1 < rows; r += 2) {
      const __m512 d0 = _mm512_sub_ps(load16(column + r * C), m);
      const __m512 d1 = _mm512_sub_ps(load16(column + (r + 1) * C), m);
      d_even = _mm512_add_ps(d_even, d0);
      d_odd = _mm512_add_ps(d_odd, d1);
      sq_even = _mm512_fmadd_ps(d0, d0, sq_even);
      sq_odd = _mm512_fmadd_ps(d1, d1, sq_odd);
    }
    if (r < rows) {
      const __m512 d0 = _mm512_sub_ps(load16(column + r * C), m);
      d_even = _mm512_add_ps(d_even, d0);
      sq_even = _mm512_fmadd_ps(d0, d0, sq_even);
    }
    _mm512_storeu_ps(out + c, m);
    _mm512_storeu_ps(out + C + c, _mm512_add_ps(d_even, d_odd));
    _mm512_storeu_ps(out + 2 * C + c, _mm512_add_ps(sq_even, sq_odd));
  }
}

// v as T holds it (bf16: rounded to nearest even), back in f32.
template <typename T>
TANDEM_AVX512 inline __m512 rounded(__m512 v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return widen16(bf16_bits(v));
  }
}

// The channel of the 16 values after those of channel c (C channels a row).
inline int64_t next_channels(int64_t c, int64_t C) {
  return c + 16 == C ? 0 : c + 16;
}

// normalize's 16 values at i, channels [c, c + 16).
template <typename T>
TANDEM_AVX512 inline __m512 normalized(const T* x, int64_t i, int64_t c, const float* a,
                                       const float* b, const T* residual, uint16_t* mask) {
  __m512 v = _mm512_fmadd_ps(load16(x + i), _mm512_loadu_ps(a + c), _mm512_loadu_ps(b + c));
  if (residual != nullptr) {
    v = _mm512_add_ps(rounded<T>(v), load16(residual + i));
    v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v);
    mask[i / 16] = _mm512_cmp_ps_mask(rounded<T>(v), _mm512_setzero_ps(), _CMP_GT_OQ);
  } else if (mask != nullptr) {
    const __mmask16 positive = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ);
    v = _mm512_maskz_mov_ps(positive, v);
    mask[i / 16] = positive;
  }
  return v;
}

// y = x a + b over n values (whole rows of C); with mask: y = max(y, 0)
// and mask's bit set where y > 0 (one 16-bit word per 16 values, x's
// order). With a residual r (and mask): y = max(round(x a + b) + r, 0),
// the bits add_relu gives after the plain batch norm, and the bit set
// where y as stored is above zero (relu's backward reads the stored y).
// The rows run as one sequence, 32 values a step, so that bf16 results
// convert and store in pairs (store32) whatever C is.
template <typename T>
TANDEM_AVX512 void normalize(const T* x, int64_t n, int64_t C, const float* a, const float* b,
                             const T* residual, T* y, uint16_t* mask) {
  int64_t i = 0, c = 0;
  for (; i + 32 <= n; i += 32) {
    const int64_t c1 = next_channels(c, C);
    const __m512 lo = normalized(x, i, c, a, b, residual, mask);
    store32(y + i, lo, normalized(x, i + 16, c1, a, b, residual, mask));
    c = next_channels(c1, C);
  }
  if (i < n) store16(y + i, normalized(x, i, c, a, b, residual, mask));
}

// g = dy (masked) at i, channels [c, c + 16): the sums' terms g and g
// xhat; g itself into masked when non-null (a residual's gradient).
template <typename T>
TANDEM_AVX512 inline void add_gradient_terms(const T* x, const T* dy, const uint16_t* mask,
                                             int64_t i, __m512 m, __m512 s, __m512& g_acc,
                                             __m512& gx_acc, T* masked) {
  __m512 g = load16(dy + i);
  if (mask != nullptr) g = _mm512_maskz_mov_ps(mask[i / 16], g);
  if (masked != nullptr) store16(masked + i, g);
  const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load16(x + i), m), s);
  g_acc = _mm512_add_ps(g_acc, g);
  gx_acc = _mm512_fmadd_ps(g, xhat, gx_acc);
}

// The backward's per-channel sums of g and g xhat over a block of rows,
// added to sum_g and sum_gx; two chains of rows each, so that the adds'
// latency does not bound the loop where a row is one vector (C = 16).
template <typename T>
TANDEM_AVX512 void gradient_sums(const T* x, const T* dy, const uint16_t* mask, int64_t rows,
                                 int64_t C, const float* mean, const float* rstd, float* sum_g,
                                 float* sum_gx, T* masked) {
  for (int64_t c = 0; c < C; c += 16) {
    __m512 g_even = _mm512_loadu_ps(sum_g + c), gx_even = _mm512_loadu_ps(sum_gx + c);
    __m512 g_odd = _mm512_setzero_ps(), gx_odd = _mm512_setzero_ps();
    const __m512 m = _mm512_loadu_ps(mean + c), s = _mm512_loadu_ps(rstd + c);
    int64_t r = 0;
    for (; r + 1 < rows; r += 2) {
      add_gradient_terms(x, dy, mask, r * C + c, m, s, g_even, gx_even, masked);
      add_gradient_terms(x, dy, mask, (r + 1) * C + c, m, s, g_odd, gx_odd, masked);
    }
    if (r < rows) add_gradient_terms(x, dy, mask, r * C + c, m, s, g_even, gx_even, masked);
    _mm512_storeu_ps(sum_g + c, _mm512_add_ps(g_even, g_odd));
    _mm512_storeu_ps(sum_gx + c, _mm512_add_ps(gx_even, gx_odd));
  }
}

// dx = scale (g - mean_g - xhat mean_gx) at i, channels [c, c + 16).
template <typename T>
TANDEM_AVX512 inline __m512 input_gradient_at(const T* x, const T* dy, const uint16_t* mask,
                                              int64_t i, int64_t c, const float* mean,
                                              const float* rstd, const float* scale,
                                              const float* mean_g, const float* mean_gx) {
  __m512 g = load16(dy + i);
  if (mask != nullptr) g = _mm512_maskz_mov_ps(mask[i / 16], g);
  const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load16(x + i), _mm512_loadu_ps(mean + c)),
                                    _mm512_loadu_ps(rstd + c));
  const __m512 inner = _mm512_sub_ps(_mm512_sub_ps(g, _mm512_loadu_ps(mean_g + c)),
                                     _mm512_mul_ps(xhat, _mm512_loadu_ps(mean_gx + c)));
  return _mm512_mul_ps(_mm512_loadu_ps(scale + c), inner);
}

// dx over n values (whole rows of C), in pairs as normalize.
template <typename T>
TANDEM_AVX512 void input_gradient(const T* x, const T* dy, const uint16_t* mask, int64_t n,
                                  int64_t C, const float* mean, const float* rstd,
                                  const float* scale, const float* mean_g, const float* mean_gx,
                                  T* dx) {
  int64_t i = 0, c = 0;
  for (; i + 32 <= n; i += 32) {
    const int64_t c1 = next_channels(c, C);
    const __m512 lo = input_gradient_at(x, dy, mask, i, c, mean, rstd, scale, mean_g, mean_gx);
    store32(dx + i, lo,
            input_gradient_at(x, dy, mask, i + 16, c1, mean, rstd, scale, mean_g, mean_gx));
    c = next_channels(c1, C);
  }
  if (i < n)
    store16(dx + i, input_gradient_at(x, dy, mask, i, c, mean, rstd, scale, mean_g, mean_gx));
}

// Per block of rows, `width` floats from add(r0, rows, out) into a zeroed
// out: blocks [b * width, (b + 1) * width) of the result, in parallel.
template <typename Add>
std::vector<float> block_partials(int64_t R, int64_t C, int64_t width, Add add) {
  const int64_t per_block = block_rows(C);
  const int64_t blocks = (R + per_block - 1) / per_block;
  std::vector<float> partial(static_cast<size_t>(blocks * width), 0.0f);
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      add(b * per_block, std::min(per_block, R - b * per_block), partial.data() + b * width);
  });
  return partial;
}

// Per-channel sums of `width` floats over blocks of rows: add(r0, rows,
// sums) adds rows [r0, r0 + rows) into sums (zeroed f32); blocks' sums are
// added in double, in block order.
template <typename Add>
std::vector<double> sum_blocks(int64_t R, int64_t C, int64_t width, Add add) {
  const std::vector<float> partial = block_partials(R, C, width, add);
  std::vector<double> total(static_cast<size_t>(width), 0.0);
  for (size_t b = 0; b < partial.size(); b += static_cast<size_t>(width))
    for (int64_t i = 0; i < width; ++i) total[i] += partial[b + i];
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

struct Moments {
  std::vector<float> mean, variance;  // biased
};

// Per-channel mean and variance from each block's m_b, sum of d and sum of
// d^2 (add(r0, rows, out) writes them, 3 C floats), across blocks in
// double, in block order: mean = sum over blocks of (rows_b m_b + sum d) / R,
// and sum (x - mean)^2 = sum over blocks of sum d^2 + 2 (m_b - mean) sum d
// + rows_b (m_b - mean)^2.
template <typename Add>
Moments moments(int64_t R, int64_t C, Add add) {
  const int64_t per_block = block_rows(C);
  const int64_t blocks = (R + per_block - 1) / per_block, width = 3 * C;
  const std::vector<float> partial = block_partials(R, C, width, add);
  const auto rows_of = [&](int64_t b) {
    return static_cast<double>(std::min(per_block, R - b * per_block));
  };
  std::vector<double> mean(static_cast<size_t>(C), 0.0), squares(static_cast<size_t>(C), 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* p = partial.data() + b * width;
    for (int64_t c = 0; c < C; ++c) mean[c] += rows_of(b) * p[c] + p[C + c];
  }
  for (int64_t c = 0; c < C; ++c) mean[c] /= static_cast<double>(R);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* p = partial.data() + b * width;
    for (int64_t c = 0; c < C; ++c) {
      const double offset = p[c] - mean[c];
      squares[c] += p[2 * C + c] + 2.0 * offset * p[C + c] + rows_of(b) * offset * offset;
    }
  }
  Moments m{std::vector<float>(static_cast<size_t>(C)), std::vector<float>(static_cast<size_t>(C))};
  for (int64_t c = 0; c < C; ++c) {
    m.mean[c] = static_cast<float>(mean[c]);
    m.variance[c] = static_cast<float>(std::max(0.0, squares[c] / static_cast<double>(R)));
  }
  return m;
}

// The bit mask's shape: one bit per value of x.
Shape mask_shape(const Tensor& x) {
  return Shape{x.numel() / 8};
}

Tensor channel_tensor(const std::vector<float>& values, const Tensor& like) {
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(values.size())}, DType::f32, like.device());
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

}  // namespace

bool batch_norm_rows_apply(const Tensor& x) {
  return has_avx512() && (x.dtype() == DType::f32 || x.dtype() == DType::bf16) &&
         x.dim(-1) % 16 == 0;
}

BatchNormForward batch_norm_rows_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                          float eps, bool relu, const Tensor& residual) {
  const int64_t C = x.dim(-1), R = x.numel() / C;
  BatchNormForward result{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor(), Tensor(),
                          relu ? Tensor::empty(mask_shape(x), DType::u8, x.device()) : Tensor()};
  dispatch_f32_or_bf16(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x.raw_data());
    const Moments m = moments(R, C, [&](int64_t r0, int64_t rows, float* out) {
      block_moments(xs + r0 * C, rows, C, out);
    });
    std::vector<float> a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      a[c] = static_cast<float>(gamma.data<float>()[c] /
                                std::sqrt(static_cast<double>(m.variance[c]) + eps));
      b[c] = beta.data<float>()[c] - m.mean[c] * a[c];
    }
    T* ys = static_cast<T*>(result.y.raw_data());
    auto* mask = relu ? reinterpret_cast<uint16_t*>(result.relu_mask.raw_data()) : nullptr;
    const T* rs = residual.defined() ? static_cast<const T*>(residual.raw_data()) : nullptr;
    for_blocks(R, C, [&](int64_t r0, int64_t rows) {
      normalize(xs + r0 * C, rows * C, C, a.data(), b.data(), rs == nullptr ? nullptr : rs + r0 * C,
                ys + r0 * C, mask == nullptr ? nullptr : mask + r0 * C / 16);
    });
    result.mean = channel_tensor(m.mean, x);
    result.variance = channel_tensor(m.variance, x);
  });
  return result;
}

NormGrads batch_norm_rows_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                   const Tensor& variance, const Tensor& gamma, float eps,
                                   const Tensor& relu_mask, Tensor* residual_grad) {
  const int64_t C = x.dim(-1), R = x.numel() / C;
  if (relu_mask.defined() &&
      (relu_mask.dtype() != DType::u8 || relu_mask.shape() != mask_shape(x))) {
    TANDEM_THROW(ShapeError, "batch_norm_backward: the ReLU mask must be u8 ",
                 mask_shape(x).to_string(), ", a bit per value of x ", x.shape().to_string(),
                 " (from batch_norm_train), got ", relu_mask.to_string());
  }
  const Tensor rstd_values = inverse_std(variance, eps);
  const float* rstd = rstd_values.data<float>();
  const float* mu = mean.data<float>();
  const auto* mask =
      relu_mask.defined() ? reinterpret_cast<const uint16_t*>(relu_mask.raw_data()) : nullptr;
  NormGrads grads{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor(), Tensor()};
  if (residual_grad != nullptr) *residual_grad = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_f32_or_bf16(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x.raw_data());
    const T* gs = static_cast<const T*>(dy.raw_data());
    T* masked = residual_grad != nullptr ? static_cast<T*>(residual_grad->raw_data()) : nullptr;
    const std::vector<double> sums =
        sum_blocks(R, C, 2 * C, [&](int64_t r0, int64_t rows, float* s) {
          gradient_sums(xs + r0 * C, gs + r0 * C, mask == nullptr ? nullptr : mask + r0 * C / 16,
                        rows, C, mu, rstd, s, s + C, masked == nullptr ? nullptr : masked + r0 * C);
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
      input_gradient(xs + r0 * C, gs + r0 * C, mask == nullptr ? nullptr : mask + r0 * C / 16,
                     rows * C, C, mu, rstd, scale.data(), mean_g.data(), mean_gx.data(),
                     dxs + r0 * C);
    });
    grads.dgamma = channel_tensor(dgamma, x);
    grads.dbeta = channel_tensor(dbeta, x);
  });
  return grads;
}

}  // namespace tandem::kernels::detail
