#include "tandem/kernels/detail/attention_rows_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/kernels/detail/float_io.h"

namespace tandem::kernels::detail {
namespace {

// Rows per parallel range: a few heads' worth of causal rows.
constexpr int64_t kRowGrain = 16;

// Keys row i sees: [0, limit).
int64_t visible_keys(const AttentionRows& r, int64_t i) {
  return r.causal ? std::min(i + 1, r.S) : r.S;
}

// The lanes of the block of 16 keys from j that lie below `limit`.
TANDEM_AVX512 inline __mmask16 lanes_below(int64_t j, int64_t limit) {
  if (limit - j >= 16) return static_cast<__mmask16>(0xFFFF);
  return limit <= j ? static_cast<__mmask16>(0) : first_lanes(limit - j);
}

// Dropout's factors for keys [j, j + 16) of row i of head h (those past
// `lanes` are not asked for).
TANDEM_AVX512 inline __m512 dropout_factors(const AttentionRows& r, int64_t h, int64_t i, int64_t j,
                                            __mmask16 lanes) {
  alignas(64) float f[16] = {};
  for (int lane = 0; lane < 16; ++lane)
    if (lanes & (1u << lane)) f[lane] = r.dropout_factor(h, i, j + lane);
  return _mm512_load_ps(f);
}

template <typename T>
TANDEM_AVX512 inline void store_block(T* p, __m512 v, __mmask16 lanes) {
  if (lanes == 0xFFFF) {
    store16(p, v);
  } else {
    store16_masked(p, v, lanes);
  }
}

// Rows [begin, end) of the group: the scores (f32, overwritten by their
// exponentials) become probabilities in T storage (probs may be scores),
// and each row's log-sum-exp goes to lse.
template <typename T>
TANDEM_AVX512 void probability_rows(const AttentionRows& r, int64_t first, float* scores,
                                    float* lse, T* probs, int64_t begin, int64_t end) {
  const __m512 scale = splat(r.scale);
  for (int64_t row = begin; row < end; ++row) {
    const int64_t h = first + row / r.T, i = row % r.T, limit = visible_keys(r, i);
    float* x = scores + row * r.S;
    T* p = probs + row * r.S;
    __m512 m = splat(-std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < limit; j += 16) {
      const __mmask16 k = lanes_below(j, limit);
      m = _mm512_mask_max_ps(m, k, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + j), scale));
    }
    const float max = _mm512_reduce_max_ps(m);
    const __m512 shift = splat(max);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < limit; j += 16) {
      const __mmask16 k = lanes_below(j, limit);
      const __m512 e = exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, x + j), scale, shift));
      sum = _mm512_mask_add_ps(sum, k, sum, e);
      _mm512_mask_storeu_ps(x + j, k, e);
    }
    const float total = _mm512_reduce_add_ps(sum);
    const __m512 inverse = splat(1.0f / total);
    for (int64_t j = 0; j < r.S; j += 16) {
      const __mmask16 k = lanes_below(j, limit);
      __m512 prob = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + j), inverse);
      if (r.dropout && k != 0) prob = _mm512_mul_ps(prob, dropout_factors(r, h, i, j, k));
      store_block(p + j, prob, lanes_below(j, r.S));
    }
    lse[h * r.T + i] = max + std::log(total);
  }
}

// probability_rows for rows of at most 16 Blocks keys, Rows rows at a time
// held in registers. A row's reductions, exponentials and logarithm are one
// chain of about 200 cycles that the out-of-order window could not overlap
// with the next row's (gpt's rows of 128 spent 40% of its attention's
// forward there): the rows side by side are independent chains. The same
// operations in the same order for each row, so the same bits.
//
// GCC 12 warns that _mm512_reduce_*'s own _mm256_undefined_pd() is used
// uninitialized when several of them are inlined side by side (a false
// positive: the undefined half is never read).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
template <int Rows, int Blocks, typename T>
TANDEM_AVX512 void probability_rows_held(const AttentionRows& r, int64_t first, float* scores,
                                         float* lse, T* probs, int64_t row0) {
  const __m512 scale = splat(r.scale);
  int64_t h[Rows], i[Rows], limit[Rows];
  __m512 v[Rows][Blocks], m[Rows], sum[Rows];
  for (int n = 0; n < Rows; ++n) {
    h[n] = first + (row0 + n) / r.T;
    i[n] = (row0 + n) % r.T;
    limit[n] = visible_keys(r, i[n]);
    m[n] = splat(-std::numeric_limits<float>::infinity());
    sum[n] = _mm512_setzero_ps();
    for (int b = 0; b < Blocks; ++b) {
      const __mmask16 k = lanes_below(16 * b, limit[n]);
      v[n][b] = _mm512_maskz_loadu_ps(k, scores + (row0 + n) * r.S + 16 * b);
      m[n] = _mm512_mask_max_ps(m[n], k, m[n], _mm512_mul_ps(v[n][b], scale));
    }
  }
  float max[Rows];
  for (int n = 0; n < Rows; ++n) max[n] = _mm512_reduce_max_ps(m[n]);
  for (int n = 0; n < Rows; ++n) {
    const __m512 shift = splat(max[n]);
    for (int b = 0; b < Blocks; ++b) {
      if (16 * b >= limit[n]) {
        v[n][b] = _mm512_setzero_ps();
        continue;
      }
      const __mmask16 k = lanes_below(16 * b, limit[n]);
      v[n][b] = _mm512_maskz_mov_ps(k, exp16(_mm512_fmsub_ps(v[n][b], scale, shift)));
      sum[n] = _mm512_mask_add_ps(sum[n], k, sum[n], v[n][b]);
    }
  }
  for (int n = 0; n < Rows; ++n) {
    const float total = _mm512_reduce_add_ps(sum[n]);
    const __m512 inverse = splat(1.0f / total);
    T* p = probs + (row0 + n) * r.S;
    for (int b = 0; b < Blocks && 16 * b < r.S; ++b) {
      const __mmask16 k = lanes_below(16 * b, limit[n]);
      __m512 prob = _mm512_mul_ps(v[n][b], inverse);
      if (r.dropout && k != 0)
        prob = _mm512_mul_ps(prob, dropout_factors(r, h[n], i[n], 16 * b, k));
      store_block(p + 16 * b, prob, lanes_below(16 * b, r.S));
    }
    lse[h[n] * r.T + i[n]] = max[n] + std::log(total);
  }
}
#pragma GCC diagnostic pop

// Rows [begin, end) through probability_rows_held, four at a time.
template <typename T>
TANDEM_AVX512 void probability_rows_of_128(const AttentionRows& r, int64_t first, float* scores,
                                           float* lse, T* probs, int64_t begin, int64_t end) {
  int64_t row = begin;
  for (; row + 4 <= end; row += 4) probability_rows_held<4, 8>(r, first, scores, lse, probs, row);
  for (; row < end; ++row) probability_rows_held<1, 8>(r, first, scores, lse, probs, row);
}

// Rows [begin, end): the probabilities again from the scores (q . k, f32)
// and the log-sum-exp into kept, and the gradient of the raw scores, P (dP
// - D) scale, into dscores; in f32 these may be the inputs themselves.
template <typename T>
TANDEM_AVX512 void score_grad_rows(const AttentionRows& r, int64_t first, const float* scores,
                                   const float* dprobs, const float* lse, const float* row_dot,
                                   T* kept, T* dscores, int64_t begin, int64_t end) {
  const __m512 scale = splat(r.scale);
  for (int64_t row = begin; row < end; ++row) {
    const int64_t h = first + row / r.T, i = row % r.T, limit = visible_keys(r, i);
    const __m512 l = splat(lse[h * r.T + i]), d = splat(row_dot[h * r.T + i]);
    const float* s = scores + row * r.S;
    const float* dp = dprobs + row * r.S;
    T* kp = kept + row * r.S;
    T* ds = dscores + row * r.S;
    for (int64_t j = 0; j < r.S; j += 16) {
      const __mmask16 k = lanes_below(j, limit), lanes = lanes_below(j, r.S);
      if (k == 0) {
        store_block(kp + j, _mm512_setzero_ps(), lanes);
        store_block(ds + j, _mm512_setzero_ps(), lanes);
        continue;
      }
      const __m512 prob =
          _mm512_maskz_mov_ps(k, exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, s + j), scale, l)));
      // dS = P (dP f - D) scale with f the dropout factor (dP the gradient
      // after dropout), and the kept probabilities P f.
      const __m512 f = r.dropout ? dropout_factors(r, h, i, j, k) : splat(1.0f);
      const __m512 grad = _mm512_maskz_mov_ps(
          k,
          _mm512_mul_ps(
              _mm512_mul_ps(prob, _mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, dp + j), f, d)), scale));
      store_block(kp + j, _mm512_mul_ps(prob, f), lanes);
      store_block(ds + j, grad, lanes);
    }
  }
}

// Rows [begin, end) of (rows, D): out[row] = a_row . b_row, products and
// sum in double.
template <typename T>
TANDEM_AVX512 void row_dots(const T* a, const T* b, float* out, int64_t D, int64_t begin,
                            int64_t end) {
  for (int64_t row = begin; row < end; ++row) {
    const T* x = a + row * D;
    const T* y = b + row * D;
    __m512d acc = _mm512_setzero_pd();
    int64_t c = 0;
    for (; c + 16 <= D; c += 16) {
      const __m512 u = load16(x + c), v = load16(y + c);
      acc = _mm512_fmadd_pd(widen8<0>(u), widen8<0>(v), acc);
      acc = _mm512_fmadd_pd(widen8<1>(u), widen8<1>(v), acc);
    }
    double sum = _mm512_reduce_add_pd(acc);
    for (; c < D; ++c) sum += static_cast<double>(to_f32(x[c])) * to_f32(y[c]);
    out[row] = static_cast<float>(sum);
  }
}

}  // namespace

bool attention_rows_avx512_apply() {
  return has_avx512();
}

void attention_probabilities_avx512(const AttentionRows& rows, int64_t first, Tensor& scores,
                                    Tensor& lse, Tensor& probs) {
  float* s = scores.data<float>();
  float* l = lse.data<float>();
  dispatch_f32_or_bf16(probs.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(probs.raw_data());
    parallel_for(scores.dim(0) * rows.T, kRowGrain, [&](int64_t begin, int64_t end) {
      if (rows.S <= 128) {
        probability_rows_of_128(rows, first, s, l, p, begin, end);
      } else {
        probability_rows(rows, first, s, l, p, begin, end);
      }
    });
  });
}

void attention_score_grads_avx512(const AttentionRows& rows, int64_t first, Tensor& probs,
                                  Tensor& dprobs, const Tensor& lse, const Tensor& row_dot,
                                  Tensor& kept, Tensor& dscores) {
  const float* s = probs.data<float>();
  const float* dp = dprobs.data<float>();
  const float* l = lse.data<float>();
  const float* rd = row_dot.data<float>();
  dispatch_f32_or_bf16(kept.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* kp = static_cast<T*>(kept.raw_data());
    T* ds = static_cast<T*>(dscores.raw_data());
    parallel_for(probs.dim(0) * rows.T, kRowGrain, [&](int64_t begin, int64_t end) {
      score_grad_rows(rows, first, s, dp, l, rd, kp, ds, begin, end);
    });
  });
}

Tensor attention_row_dot_avx512(const Tensor& dout, const Tensor& out) {
  const int64_t D = dout.dim(-1), rows = dout.numel() / std::max<int64_t>(D, 1);
  Tensor row_dot = Tensor::empty(Shape{rows}, DType::f32, dout.device());
  float* rd = row_dot.data<float>();
  dispatch_f32_or_bf16(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* a = static_cast<const T*>(dout.raw_data());
    const T* b = static_cast<const T*>(out.raw_data());
    parallel_for(rows, 64, [&](int64_t begin, int64_t end) { row_dots(a, b, rd, D, begin, end); });
  });
  return row_dot;
}

}  // namespace tandem::kernels::detail
