#include "support/reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "support/gradcheck.h"
#include "tandem/base/random.h"
#include "tandem/tensor/convert.h"

namespace tandem::testing {

double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(a[i]) * a[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

std::vector<double> to_doubles(const Tensor& t) {
  const std::vector<float> f = t.to_floats();
  return {f.begin(), f.end()};
}

std::vector<double> matmul_reference(const std::vector<double>& a, const std::vector<double>& b,
                                     const MatmulShape& s) {
  std::vector<double> out(static_cast<size_t>(s.batch * s.M * s.N), 0.0);
  for (int64_t e = 0; e < s.batch; ++e) {
    const double* pa = a.data() + e * s.M * s.K;
    const double* pb = b.data() + (s.shared_b ? 0 : e * s.K * s.N);
    for (int64_t m = 0; m < s.M; ++m)
      for (int64_t n = 0; n < s.N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < s.K; ++k)
          acc += pa[s.transpose_a ? k * s.M + m : m * s.K + k] *
                 pb[s.transpose_b ? n * s.K + k : k * s.N + n];
        out[static_cast<size_t>((e * s.M + m) * s.N + n)] = acc;
      }
  }
  return out;
}

namespace {

// Calls visit(y index, x index, w index) for every (output, input, weight)
// triple of a convolution that touches the input (padding skipped).
template <typename Visit>
void for_each_tap(const Shape& x, const Shape& w, const kernels::Conv2dGeometry& g, Visit visit) {
  const Shape y = kernels::conv2d_output_shape(x, w, g);
  for (int64_t n = 0; n < y[0]; ++n)
    for (int64_t oh = 0; oh < y[1]; ++oh)
      for (int64_t ow = 0; ow < y[2]; ++ow)
        for (int64_t kh = 0; kh < w[0]; ++kh)
          for (int64_t kw = 0; kw < w[1]; ++kw) {
            const int64_t ih = oh * g.stride_h - g.pad_h + kh * g.dilation_h;
            const int64_t iw = ow * g.stride_w - g.pad_w + kw * g.dilation_w;
            if (ih < 0 || ih >= x[1] || iw < 0 || iw >= x[2]) continue;
            for (int64_t c = 0; c < w[2]; ++c)
              for (int64_t o = 0; o < w[3]; ++o)
                visit(static_cast<size_t>(((n * y[1] + oh) * y[2] + ow) * y[3] + o),
                      static_cast<size_t>(((n * x[1] + ih) * x[2] + iw) * x[3] + c),
                      static_cast<size_t>(((kh * w[1] + kw) * w[2] + c) * w[3] + o));
          }
}

// Calls visit(y index, x index) for every window position inside the input.
template <typename Visit>
void for_each_window(const Shape& x, const kernels::Pool2dGeometry& g, Visit visit) {
  const Shape y = kernels::pool2d_output_shape(x, g);
  for (int64_t n = 0; n < y[0]; ++n)
    for (int64_t oh = 0; oh < y[1]; ++oh)
      for (int64_t ow = 0; ow < y[2]; ++ow)
        for (int64_t c = 0; c < y[3]; ++c)
          for (int64_t kh = 0; kh < g.kernel_h; ++kh)
            for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
              const int64_t ih = oh * g.stride_h - g.pad_h + kh;
              const int64_t iw = ow * g.stride_w - g.pad_w + kw;
              if (ih < 0 || ih >= x[1] || iw < 0 || iw >= x[2]) continue;
              visit(static_cast<size_t>(((n * y[1] + oh) * y[2] + ow) * y[3] + c),
                    static_cast<size_t>(((n * x[1] + ih) * x[2] + iw) * x[3] + c));
            }
}

}  // namespace

void expect_batched_product_near_double_sums(const Tensor& a, const Tensor& b, const Tensor& out,
                                             bool transpose_a, bool transpose_b,
                                             const std::function<int64_t(int64_t)>& columns) {
  const int64_t batch = out.dim(0), M = out.dim(1), N = out.dim(2);
  const int64_t K = transpose_a ? a.dim(1) : a.dim(2);
  const std::vector<double> av = to_doubles(a), bv = to_doubles(b), got = to_doubles(out);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < columns(m); ++n) {
        double sum = 0.0, magnitude = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const double x = av[i * M * K + (transpose_a ? k * M + m : m * K + k)];
          const double y = bv[i * K * N + (transpose_b ? n * K + k : k * N + n)];
          sum += x * y;
          magnitude += std::abs(x * y);
        }
        // f32 sums of exact products; a bf16 output rounds once more.
        const double bound = 4.0 * std::sqrt(static_cast<double>(K)) * 6e-8 * magnitude +
                             (out.dtype() == DType::bf16 ? std::abs(sum) / 256.0 : 0.0);
        ASSERT_NEAR(got[(i * M + m) * N + n], sum, bound + 1e-30) << i << " " << m << " " << n;
      }
}

std::vector<float> bf16_rounding_cases() {
  Generator g(11);
  std::vector<float> values;
  for (uint32_t high = 0; high <= 0xFFFF; ++high) {
    for (uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu,
                         static_cast<uint32_t>(g.next_below(0x10000))}) {
      values.push_back(std::bit_cast<float>((high << 16) | low));
    }
  }
  return values;
}

std::vector<float> shuffled(std::vector<float> values, uint64_t seed) {
  Generator g(seed);
  for (size_t i = values.size(); i > 1; --i) std::swap(values[i - 1], values[g.next_below(i)]);
  return values;
}

void expect_float_to_bf16_bits(const float* values, const uint16_t* bits, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(bits[i], float_to_bf16(values[i]))
        << "bits 0x" << std::hex << std::bit_cast<uint32_t>(values[i]);
  }
}

Tensor lower_triangle(int64_t batch, int64_t T, DType dtype, uint64_t seed) {
  std::vector<float> v = random_tensor(Shape{batch, T, T}, -2, 2, seed).to_floats();
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t r = 0; r < T; ++r)
      for (int64_t c = r + 1; c < T; ++c) v[static_cast<size_t>((i * T + r) * T + c)] = 0.0f;
  return Tensor::from_floats(Shape{batch, T, T}, v).to(dtype);
}

std::vector<double> conv2d_reference(const std::vector<double>& x, const Shape& xs,
                                     const std::vector<double>& w, const Shape& ws,
                                     const kernels::Conv2dGeometry& g) {
  std::vector<double> y(static_cast<size_t>(kernels::conv2d_output_shape(xs, ws, g).numel()), 0.0);
  for_each_tap(xs, ws, g, [&](size_t yi, size_t xi, size_t wi) { y[yi] += x[xi] * w[wi]; });
  return y;
}

std::vector<double> conv2d_backward_data_reference(const std::vector<double>& dy,
                                                   const std::vector<double>& w, const Shape& ws,
                                                   const Shape& xs,
                                                   const kernels::Conv2dGeometry& g) {
  std::vector<double> dx(static_cast<size_t>(xs.numel()), 0.0);
  for_each_tap(xs, ws, g, [&](size_t yi, size_t xi, size_t wi) { dx[xi] += dy[yi] * w[wi]; });
  return dx;
}

std::vector<double> conv2d_backward_weights_reference(const std::vector<double>& x, const Shape& xs,
                                                      const std::vector<double>& dy,
                                                      const Shape& ws,
                                                      const kernels::Conv2dGeometry& g) {
  std::vector<double> dw(static_cast<size_t>(ws.numel()), 0.0);
  for_each_tap(xs, ws, g, [&](size_t yi, size_t xi, size_t wi) { dw[wi] += x[xi] * dy[yi]; });
  return dw;
}

std::vector<double> pool2d_reference(const std::vector<double>& x, const Shape& xs,
                                     const kernels::Pool2dGeometry& g, bool max) {
  const Shape ys = kernels::pool2d_output_shape(xs, g);
  std::vector<double> y(static_cast<size_t>(ys.numel()),
                        max ? -std::numeric_limits<double>::infinity() : 0.0);
  for_each_window(
      xs, g, [&](size_t yi, size_t xi) { y[yi] = max ? std::max(y[yi], x[xi]) : y[yi] + x[xi]; });
  if (!max)
    for (double& v : y) v /= static_cast<double>(g.kernel_h * g.kernel_w);
  return y;
}

std::vector<double> max_pool2d_backward_reference(const std::vector<double>& x, const Shape& xs,
                                                  const std::vector<double>& dy,
                                                  const kernels::Pool2dGeometry& g) {
  const Shape ys = kernels::pool2d_output_shape(xs, g);
  std::vector<size_t> best(static_cast<size_t>(ys.numel()), SIZE_MAX);
  for_each_window(xs, g, [&](size_t yi, size_t xi) {
    if (best[yi] == SIZE_MAX || x[xi] > x[best[yi]]) best[yi] = xi;
  });
  std::vector<double> dx(x.size(), 0.0);
  for (size_t yi = 0; yi < best.size(); ++yi) dx[best[yi]] += dy[yi];
  return dx;
}

namespace {

// Query i of head h (flattened over B and H): its softmax probabilities
// over the keys (0 where masked) and the dropout's factors (0, or
// 1 / (1 - p)) as the kernels' documented rule draws them.
void attention_row(const std::vector<double>& q, const std::vector<double>& k,
                   const AttentionShape& a, int64_t h, int64_t i,
                   std::vector<double>& probabilities, std::vector<double>& factors) {
  const int64_t T = a.T, S = a.S, D = a.D;
  const double scale = 1 / std::sqrt(static_cast<double>(D));
  const auto threshold = static_cast<uint64_t>(std::ldexp(a.dropout, 32));
  probabilities.assign(static_cast<size_t>(S), 0.0);
  factors.assign(static_cast<size_t>(S), 0.0);
  double m = -INFINITY, total = 0;
  for (int64_t j = 0; j < S && !(a.causal && j > i); ++j) {
    double dot = 0;
    for (int64_t c = 0; c < D; ++c) dot += q[(h * T + i) * D + c] * k[(h * S + j) * D + c];
    m = std::max(m, probabilities[j] = dot * scale);
  }
  for (int64_t j = 0; j < S && !(a.causal && j > i); ++j)
    total += (probabilities[j] = std::exp(probabilities[j] - m));
  for (int64_t j = 0; j < S; ++j) {
    probabilities[j] /= total;
    const auto position = static_cast<uint64_t>((h * T + i) * S + j);
    const bool dropped = a.dropout > 0 && random_bits_at(a.seed, position) < threshold;
    factors[j] = dropped ? 0 : 1 / (1 - a.dropout);
  }
}

}  // namespace

std::vector<double> attention_reference(const std::vector<double>& q, const std::vector<double>& k,
                                        const std::vector<double>& v, const AttentionShape& a) {
  const int64_t T = a.T, S = a.S, D = a.D;
  std::vector<double> out(static_cast<size_t>(a.B * a.H * T * D), 0.0), p, f;
  for (int64_t h = 0; h < a.B * a.H; ++h)
    for (int64_t i = 0; i < T; ++i) {
      attention_row(q, k, a, h, i, p, f);
      for (int64_t j = 0; j < S; ++j)
        for (int64_t c = 0; c < D; ++c)
          out[(h * T + i) * D + c] += p[j] * f[j] * v[(h * S + j) * D + c];
    }
  return out;
}

// The gradients of sum(attention(q, k, v) * dout) with respect to q, k, v:
// through the dropped probabilities, the softmax (ds = P (dP - sum(P dP)))
// and the scaled scores.
std::vector<std::vector<double>> attention_gradient_reference(const std::vector<double>& q,
                                                              const std::vector<double>& k,
                                                              const std::vector<double>& v,
                                                              const AttentionShape& a,
                                                              const std::vector<double>& dout) {
  const int64_t T = a.T, S = a.S, D = a.D;
  const double scale = 1 / std::sqrt(static_cast<double>(D));
  std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0), p, f;
  std::vector<double> dp(static_cast<size_t>(S));
  for (int64_t h = 0; h < a.B * a.H; ++h)
    for (int64_t i = 0; i < T; ++i) {
      attention_row(q, k, a, h, i, p, f);
      const double* g = dout.data() + (h * T + i) * D;
      double weighted = 0;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < D; ++c) {
          dot += g[c] * v[(h * S + j) * D + c];
          dv[(h * S + j) * D + c] += p[j] * f[j] * g[c];
        }
        dp[j] = f[j] * dot;
        weighted += p[j] * dp[j];
      }
      for (int64_t j = 0; j < S; ++j) {
        const double ds = p[j] * (dp[j] - weighted) * scale;
        for (int64_t c = 0; c < D; ++c) {
          dq[(h * T + i) * D + c] += ds * k[(h * S + j) * D + c];
          dk[(h * S + j) * D + c] += ds * q[(h * T + i) * D + c];
        }
      }
    }
  return {dq, dk, dv};
}

void expect_close(const std::vector<double>& actual, const std::vector<double>& expected,
                  double atol, double rtol, const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double limit = atol + rtol * std::abs(expected[i]);
    if (!(std::abs(actual[i] - expected[i]) <= limit)) {
      ADD_FAILURE() << what << ": element " << i << " is " << actual[i] << ", expected "
                    << expected[i] << " (tolerance " << limit << ")";
      if (++reported == 5) return;
    }
  }
}

double dtype_rtol(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return 1.0 / 128;  // 8-bit mantissa
    case DType::f16:
      return 1.0 / 1024;
    default:
      return 1e-5;
  }
}

namespace {

// Input coordinate and weights of output index i for a resize from `in` to
// `out` samples: the half-pixel mapping, clamped to the edge samples.
struct Tap {
  int64_t lower, upper;
  double weight;  // of upper
};

Tap tap(int64_t i, int64_t in, int64_t out) {
  const double s =
      (static_cast<double>(i) + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5;
  const double clamped = std::clamp(s, 0.0, static_cast<double>(in - 1));
  const auto lower = static_cast<int64_t>(std::floor(clamped));
  const int64_t upper = std::min(lower + 1, in - 1);
  return {lower, upper, clamped - static_cast<double>(lower)};
}

}  // namespace

// x (N, H, W, C) -> (N, OH, OW, C), in double.
std::vector<double> resize_reference(const std::vector<double>& v, const Shape& x, int64_t OH,
                                     int64_t OW) {
  const int64_t N = x[0], H = x[1], W = x[2], C = x[3];
  auto at = [&](int64_t n, int64_t h, int64_t w, int64_t c) {
    return v[((n * H + h) * W + w) * C + c];
  };
  std::vector<double> out;
  out.reserve(static_cast<size_t>(N * OH * OW * C));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t oh = 0; oh < OH; ++oh) {
      const Tap ty = tap(oh, H, OH);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const Tap tx = tap(ow, W, OW);
        for (int64_t c = 0; c < C; ++c) {
          const double top = at(n, ty.lower, tx.lower, c) * (1 - tx.weight) +
                             at(n, ty.lower, tx.upper, c) * tx.weight;
          const double bottom = at(n, ty.upper, tx.lower, c) * (1 - tx.weight) +
                                at(n, ty.upper, tx.upper, c) * tx.weight;
          out.push_back(top * (1 - ty.weight) + bottom * ty.weight);
        }
      }
    }
  }
  return out;
}

}  // namespace tandem::testing
