#include "support/reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

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

std::vector<double> matmul_reference(const Tensor& a, const Tensor& b, bool transpose_a,
                                     bool transpose_b) {
  const std::vector<double> A = to_doubles(a), B = to_doubles(b);
  const int64_t M = transpose_a ? a.dim(1) : a.dim(0);
  const int64_t K = transpose_a ? a.dim(0) : a.dim(1);
  const int64_t N = transpose_b ? b.dim(0) : b.dim(1);
  std::vector<double> out(static_cast<size_t>(M * N), 0.0);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double av = transpose_a ? A[k * M + m] : A[m * K + k];
        const double bv = transpose_b ? B[n * K + k] : B[k * N + n];
        acc += av * bv;
      }
      out[m * N + n] = acc;
    }
  }
  return out;
}

namespace {

// Calls visit(n, oh, ow, o, ih, iw, c, kh, kw) for every valid (output, input, weight) triple.
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
              for (int64_t o = 0; o < w[3]; ++o) visit(n, oh, ow, o, ih, iw, c, kh, kw);
          }
}

}  // namespace

std::vector<double> conv2d_reference(const Tensor& x, const Tensor& w,
                                     const kernels::Conv2dGeometry& g) {
  const Shape xs = x.shape(), ws = w.shape();
  const Shape ys = kernels::conv2d_output_shape(xs, ws, g);
  const std::vector<double> X = to_doubles(x), W = to_doubles(w);
  std::vector<double> y(static_cast<size_t>(ys.numel()), 0.0);
  for_each_tap(xs, ws, g,
               [&](int64_t n, int64_t oh, int64_t ow, int64_t o, int64_t ih, int64_t iw, int64_t c,
                   int64_t kh, int64_t kw) {
                 y[((n * ys[1] + oh) * ys[2] + ow) * ys[3] + o] +=
                     X[((n * xs[1] + ih) * xs[2] + iw) * xs[3] + c] *
                     W[((kh * ws[1] + kw) * ws[2] + c) * ws[3] + o];
               });
  return y;
}

std::vector<double> conv2d_backward_data_reference(const Tensor& dy, const Tensor& w,
                                                   const Shape& xs,
                                                   const kernels::Conv2dGeometry& g) {
  const Shape ws = w.shape();
  const Shape ys = dy.shape();
  const std::vector<double> DY = to_doubles(dy), W = to_doubles(w);
  std::vector<double> dx(static_cast<size_t>(xs.numel()), 0.0);
  for_each_tap(xs, ws, g,
               [&](int64_t n, int64_t oh, int64_t ow, int64_t o, int64_t ih, int64_t iw, int64_t c,
                   int64_t kh, int64_t kw) {
                 dx[((n * xs[1] + ih) * xs[2] + iw) * xs[3] + c] +=
                     DY[((n * ys[1] + oh) * ys[2] + ow) * ys[3] + o] *
                     W[((kh * ws[1] + kw) * ws[2] + c) * ws[3] + o];
               });
  return dx;
}

std::vector<double> conv2d_backward_weights_reference(const Tensor& x, const Tensor& dy,
                                                      const Shape& ws,
                                                      const kernels::Conv2dGeometry& g) {
  const Shape xs = x.shape(), ys = dy.shape();
  const std::vector<double> X = to_doubles(x), DY = to_doubles(dy);
  std::vector<double> dw(static_cast<size_t>(ws.numel()), 0.0);
  for_each_tap(xs, ws, g,
               [&](int64_t n, int64_t oh, int64_t ow, int64_t o, int64_t ih, int64_t iw, int64_t c,
                   int64_t kh, int64_t kw) {
                 dw[((kh * ws[1] + kw) * ws[2] + c) * ws[3] + o] +=
                     X[((n * xs[1] + ih) * xs[2] + iw) * xs[3] + c] *
                     DY[((n * ys[1] + oh) * ys[2] + ow) * ys[3] + o];
               });
  return dw;
}

std::vector<double> max_pool2d_reference(const Tensor& x, const kernels::Pool2dGeometry& g) {
  const Shape xs = x.shape();
  const Shape ys = kernels::pool2d_output_shape(xs, g);
  const std::vector<double> X = to_doubles(x);
  std::vector<double> y(static_cast<size_t>(ys.numel()), -std::numeric_limits<double>::infinity());
  for (int64_t n = 0; n < ys[0]; ++n)
    for (int64_t oh = 0; oh < ys[1]; ++oh)
      for (int64_t ow = 0; ow < ys[2]; ++ow)
        for (int64_t c = 0; c < ys[3]; ++c)
          for (int64_t kh = 0; kh < g.kernel_h; ++kh)
            for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
              const int64_t ih = oh * g.stride_h - g.pad_h + kh;
              const int64_t iw = ow * g.stride_w - g.pad_w + kw;
              if (ih < 0 || ih >= xs[1] || iw < 0 || iw >= xs[2]) continue;
              double& out = y[((n * ys[1] + oh) * ys[2] + ow) * ys[3] + c];
              out = std::max(out, X[((n * xs[1] + ih) * xs[2] + iw) * xs[3] + c]);
            }
  return y;
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
