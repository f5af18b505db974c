// Rows for the matrix products, convolutions and pooling.
#include <algorithm>
#include <string>

#include "support/op_rows.h"
#include "tandem/autograd/functions.h"

namespace tandem::testing {
namespace {

using kernels::Activation;

// batch x (M, K) times (K, N), a stored (K, M) when ta, b stored (N, K) when tb,
// b shared by every batch element when `shared`.
Doubles products(const Doubles& a, const Doubles& b, int64_t batch, int64_t M, int64_t K, int64_t N,
                 bool ta, bool tb, bool shared) {
  Doubles out(static_cast<size_t>(batch * M * N), 0.0);
  for (int64_t e = 0; e < batch; ++e) {
    const double* pa = a.data() + e * M * K;
    const double* pb = b.data() + (shared ? 0 : e * K * N);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k)
          acc += pa[ta ? k * M + m : m * K + k] * pb[tb ? n * K + k : k * N + n];
        out[static_cast<size_t>((e * M + m) * N + n)] = acc;
      }
  }
  return out;
}

double activate(Activation a, double x) {
  switch (a) {
    case Activation::relu:
      return std::max(x, 0.0);
    case Activation::gelu:
      return gelu_erf(x);
    case Activation::gelu_tanh:
      return gelu_tanh_of(x);
    case Activation::silu:
      return silu_of(x);
    default:
      return x;
  }
}

std::string flags(bool ta, bool tb) {
  return std::string(ta ? " ta" : "") + (tb ? " tb" : "");
}

void add_matmul_rows(std::vector<OpCase>& rows) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      rows.push_back(
          {.name = "matmul" + flags(ta, tb),
           .kernels = {"matmul"},
           .inputs = {uniform(ta ? Shape{7, 5} : Shape{5, 7}),
                      uniform(tb ? Shape{6, 7} : Shape{7, 6})},
           .run = [=](const auto& in) { return matmul(in[0], in[1], ta, tb); },
           .reference =
               [=](const auto& in) { return products(in[0], in[1], 1, 5, 7, 6, ta, tb, true); },
           .low_precision = {DType::bf16}});
      for (bool shared : {false, true}) {
        const Shape as = ta ? Shape{2, 3, 7, 5} : Shape{2, 3, 5, 7};
        const Shape bs = shared ? (tb ? Shape{9, 7} : Shape{7, 9})
                                : (tb ? Shape{2, 3, 9, 7} : Shape{2, 3, 7, 9});
        rows.push_back(
            {.name = "batched_matmul" + flags(ta, tb) + (shared ? " shared" : ""),
             .kernels = {"batched_matmul", "sum_to_shape"},
             .inputs = {uniform(as), uniform(bs)},
             .run = [=](const auto& in) { return batched_matmul(in[0], in[1], ta, tb); },
             .reference =
                 [=](const auto& in) { return products(in[0], in[1], 6, 5, 7, 9, ta, tb, shared); },
             .low_precision = {DType::bf16}});
      }
    }
}

void add_linear_rows(std::vector<OpCase>& rows) {
  for (Activation a : {Activation::none, Activation::relu, Activation::gelu, Activation::gelu_tanh,
                       Activation::silu}) {
    rows.push_back(
        {.name = "linear " + std::string(kernels::activation_name(a)),
         .kernels = {"matmul", "matmul_into", "sum_to_shape", "activation_backward"},
         // Inputs away from zero keep the pre-activations off ReLU's kink for this seed.
         .inputs = {distinct(Shape{4, 6}, 0.05), uniform(Shape{5, 6}), in_f32(uniform(Shape{5}))},
         .run = [=](const auto& in) { return linear(in[0], in[1], in[2], {.activation = a}); },
         .reference =
             [=](const auto& in) {
               Doubles y = products(in[0], in[1], 1, 4, 6, 5, false, true, true);
               for (size_t i = 0; i < y.size(); ++i) y[i] = activate(a, y[i] + in[2][i % 5]);
               return y;
             },
         .low_precision = {DType::bf16}});
  }
  // Without a bias, and for a rank-3 input (flattened to rows).
  rows.push_back(
      {.name = "linear no bias rank 3",
       .kernels = {"matmul", "matmul_into"},
       .inputs = {uniform(Shape{2, 3, 6}), uniform(Shape{5, 6})},
       .run = [](const auto& in) { return linear(in[0], in[1], Variable()); },
       .reference =
           [](const auto& in) { return products(in[0], in[1], 1, 6, 6, 5, false, true, true); },
       .low_precision = {DType::bf16}});
}

// x (N, H, W, C), w (KH, KW, C, O): y (N, OH, OW, O).
Doubles convolve(const Doubles& x, const Doubles& w, const Shape& xs, const Shape& ws,
                 const kernels::Conv2dGeometry& g) {
  const Shape ys = kernels::conv2d_output_shape(xs, ws, g);
  Doubles y(static_cast<size_t>(ys.numel()), 0.0);
  for (int64_t n = 0; n < ys[0]; ++n)
    for (int64_t oh = 0; oh < ys[1]; ++oh)
      for (int64_t ow = 0; ow < ys[2]; ++ow)
        for (int64_t o = 0; o < ys[3]; ++o) {
          double acc = 0;
          for (int64_t i = 0; i < ws[0]; ++i)
            for (int64_t j = 0; j < ws[1]; ++j) {
              const int64_t h = oh * g.stride_h - g.pad_h + i * g.dilation_h;
              const int64_t v = ow * g.stride_w - g.pad_w + j * g.dilation_w;
              if (h < 0 || h >= xs[1] || v < 0 || v >= xs[2]) continue;
              for (int64_t c = 0; c < xs[3]; ++c)
                acc += x[offset(xs, {n, h, v, c})] * w[offset(ws, {i, j, c, o})];
            }
          y[offset(ys, {n, oh, ow, o})] = acc;
        }
  return y;
}

void add_conv_rows(std::vector<OpCase>& rows) {
  const kernels::Conv2dGeometry geometries[] = {
      {},
      {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1},
      {.pad_h = 2, .pad_w = 1, .dilation_h = 2}};
  const Shape xs{2, 6, 5, 3}, ws{3, 3, 3, 4};
  for (const auto& g : geometries) {
    rows.push_back({.name = "conv2d s" + std::to_string(g.stride_h) + " p" +
                            std::to_string(g.pad_h) + " d" + std::to_string(g.dilation_h),
                    .kernels = {"conv2d_forward", "conv2d_backward_data", "conv2d_backward_weights",
                                "activation_backward"},
                    .inputs = {uniform(xs), uniform(ws), in_f32(uniform(Shape{4}))},
                    .run =
                        [=](const auto& in) {
                          return conv2d(in[0], in[1], in[2],
                                        {.geometry = g, .compute_dtype = in[0].dtype()});
                        },
                    .reference =
                        [=](const auto& in) {
                          Doubles y = convolve(in[0], in[1], xs, ws, g);
                          for (size_t i = 0; i < y.size(); ++i) y[i] += in[2][i % 4];
                          return y;
                        },
                    .low_precision = {DType::bf16}});
  }
  const Shape small{1, 5, 5, 2}, sw{3, 3, 2, 3};
  const kernels::Conv2dGeometry same{.pad_h = 1, .pad_w = 1};
  rows.push_back({.name = "conv2d relu fused",
                  .kernels = {"conv2d_forward", "conv2d_backward_data", "conv2d_backward_weights",
                              "activation_backward"},
                  .inputs = {distinct(small, 0.05), uniform(sw), in_f32(uniform(Shape{3}))},
                  .run =
                      [=](const auto& in) {
                        return conv2d(in[0], in[1], in[2],
                                      {.geometry = same,
                                       .activation = Activation::relu,
                                       .compute_dtype = in[0].dtype()});
                      },
                  .reference =
                      [=](const auto& in) {
                        Doubles y = convolve(in[0], in[1], small, sw, same);
                        for (size_t i = 0; i < y.size(); ++i)
                          y[i] = std::max(0.0, y[i] + in[2][i % 3]);
                        return y;
                      },
                  .low_precision = {DType::bf16}});
}

// Max or average over each window of x (N, H, W, C); average counts padding.
Doubles pool(const Doubles& x, const Shape& xs, const kernels::Pool2dGeometry& g, bool max) {
  const Shape ys = kernels::pool2d_output_shape(xs, g);
  Doubles y(static_cast<size_t>(ys.numel()));
  for (int64_t n = 0; n < ys[0]; ++n)
    for (int64_t oh = 0; oh < ys[1]; ++oh)
      for (int64_t ow = 0; ow < ys[2]; ++ow)
        for (int64_t c = 0; c < ys[3]; ++c) {
          double acc = max ? -INFINITY : 0.0;
          for (int64_t i = 0; i < g.kernel_h; ++i)
            for (int64_t j = 0; j < g.kernel_w; ++j) {
              const int64_t h = oh * g.stride_h - g.pad_h + i, w = ow * g.stride_w - g.pad_w + j;
              if (h < 0 || h >= xs[1] || w < 0 || w >= xs[2]) continue;
              const double v = x[offset(xs, {n, h, w, c})];
              acc = max ? std::max(acc, v) : acc + v;
            }
          y[offset(ys, {n, oh, ow, c})] =
              max ? acc : acc / static_cast<double>(g.kernel_h * g.kernel_w);
        }
  return y;
}

void add_pool_rows(std::vector<OpCase>& rows) {
  const Shape xs{2, 6, 5, 3};
  const kernels::Pool2dGeometry windows[] = {
      {}, {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}};
  for (const auto& g : windows) {
    const std::string name = " k" + std::to_string(g.kernel_h) + " p" + std::to_string(g.pad_h);
    rows.push_back({.name = "max_pool2d" + name,
                    .kernels = {"max_pool2d_forward", "max_pool2d_backward"},
                    .inputs = {distinct(xs, 0.0)},
                    .run = [=](const auto& in) { return max_pool2d(in[0], g); },
                    .reference = [=](const auto& in) { return pool(in[0], xs, g, true); }});
  }
  const Shape img{2, 5, 7, 3};
  const kernels::Pool2dGeometry avg{
      .kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
  rows.push_back({.name = "avg_pool2d k3x2 s2 p1",
                  .kernels = {"avg_pool2d", "avg_pool2d_backward"},
                  .inputs = {uniform(img)},
                  .run = [=](const auto& in) { return avg_pool2d(in[0], avg); },
                  .reference = [=](const auto& in) { return pool(in[0], img, avg, false); }});
  rows.push_back({.name = "global_avg_pool",
                  .kernels = {"global_avg_pool", "global_avg_pool_backward"},
                  .inputs = {uniform(img)},
                  .run = [](const auto& in) { return global_avg_pool(in[0]); },
                  .reference =
                      [=](const auto& in) {
                        Doubles y(6, 0.0);
                        for (size_t i = 0; i < in[0].size(); ++i)
                          y[(i / 105) * 3 + i % 3] += in[0][i] / 35;
                        return y;
                      }});
}

}  // namespace

void add_dense_rows(std::vector<OpCase>& rows) {
  add_matmul_rows(rows);
  add_linear_rows(rows);
  add_conv_rows(rows);
  add_pool_rows(rows);
}

}  // namespace tandem::testing
