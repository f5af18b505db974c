// Rows for the matrix products, convolutions and pooling: small shapes whose
// gradients are central differences, and the shapes oneDNN blocks and
// threads differently (K of 784, 32 to 64 channels, zero-sized operands),
// whose gradients are the written-out references of support/reference.h.
#include <algorithm>
#include <string>

#include "support/op_rows.h"
#include "support/reference.h"
#include "tandem/autograd/functions.h"
#include "tandem/kernels/matmul.h"

namespace tandem::testing {
namespace {

using kernels::Activation;

std::string flags(bool ta, bool tb) {
  return std::string(ta ? " ta" : "") + (tb ? " tb" : "");
}

void add_matmul_rows(std::vector<OpCase>& rows) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const MatmulShape m{.M = 5, .K = 7, .N = 6, .transpose_a = ta, .transpose_b = tb};
      rows.push_back(
          {.name = "matmul" + flags(ta, tb),
           .kernels = {"matmul"},
           .inputs = {uniform(ta ? Shape{7, 5} : Shape{5, 7}),
                      uniform(tb ? Shape{6, 7} : Shape{7, 6})},
           .run = [=](const auto& in) { return matmul(in[0], in[1], ta, tb); },
           .reference = [=](const auto& in) { return matmul_reference(in[0], in[1], m); },
           .low_precision = {DType::bf16}});
      for (bool shared : {false, true}) {
        const Shape as = ta ? Shape{2, 3, 7, 5} : Shape{2, 3, 5, 7};
        const Shape bs = shared ? (tb ? Shape{9, 7} : Shape{7, 9})
                                : (tb ? Shape{2, 3, 9, 7} : Shape{2, 3, 7, 9});
        const MatmulShape b{.batch = 6,
                            .M = 5,
                            .K = 7,
                            .N = 9,
                            .transpose_a = ta,
                            .transpose_b = tb,
                            .shared_b = shared};
        rows.push_back(
            {.name = "batched_matmul" + flags(ta, tb) + (shared ? " shared" : ""),
             .kernels = {"batched_matmul", "sum_to_shape"},
             .inputs = {uniform(as), uniform(bs)},
             .run = [=](const auto& in) { return batched_matmul(in[0], in[1], ta, tb); },
             .reference = [=](const auto& in) { return matmul_reference(in[0], in[1], b); },
             .low_precision = {DType::bf16}});
      }
    }
}

// The matmul kernel's own options (transposes, bias, fused activation) at
// the shapes oneDNN blocks differently; forward only (the backward is the
// same kernel, checked through autograd above).
void add_matmul_kernel_rows(std::vector<OpCase>& rows) {
  struct Case {
    int64_t M, K, N;
    bool ta, tb, bias;
    Activation activation;
    DType out = DType::f32;
  };
  const Case cases[] = {{1, 1, 1, false, false, false, Activation::none},
                        {3, 5, 7, false, false, true, Activation::none},
                        {17, 31, 13, true, false, false, Activation::none},
                        {17, 31, 13, false, true, true, Activation::relu},
                        {16, 64, 33, true, true, false, Activation::gelu},
                        {128, 784, 10, false, true, true, Activation::none},
                        {5, 37, 11, false, false, true, Activation::relu},
                        {64, 128, 48, true, true, false, Activation::silu},
                        {7, 0, 5, false, false, true, Activation::relu},
                        {0, 3, 5, false, false, false, Activation::none},
                        // The GPU comparisons' shapes, each activation, with a bf16 result too
                        // (from f32 operands as well as bf16 ones).
                        {17, 33, 9, false, false, true, Activation::relu, DType::bf16},
                        {64, 128, 256, true, false, true, Activation::gelu},
                        {64, 128, 256, true, false, true, Activation::gelu, DType::bf16},
                        {31, 64, 48, false, true, false, Activation::gelu_tanh},
                        {31, 64, 48, false, true, false, Activation::gelu_tanh, DType::bf16},
                        {128, 77, 5, true, true, true, Activation::silu, DType::bf16}};
  for (const Case& c : cases) {
    const MatmulShape m{.M = c.M, .K = c.K, .N = c.N, .transpose_a = c.ta, .transpose_b = c.tb};
    std::vector<OpInput> inputs{uniform(c.ta ? Shape{c.K, c.M} : Shape{c.M, c.K}),
                                uniform(c.tb ? Shape{c.N, c.K} : Shape{c.K, c.N})};
    if (c.bias) inputs.push_back(in_f32(uniform(Shape{c.N})));
    // f32 sums of K products: their rounding grows with K; a bf16 result is
    // rounded once more (half of 2^-7 relative).
    const double tolerance =
        c.out == DType::bf16 ? 4e-3 : 1e-6 * std::max(1.0, std::sqrt(static_cast<double>(c.K)));
    rows.push_back(
        {.name = "matmul kernel " + std::to_string(c.M) + "x" + std::to_string(c.K) + "x" +
                 std::to_string(c.N) + flags(c.ta, c.tb) + (c.bias ? " bias " : " ") +
                 std::string(kernels::activation_name(c.activation)) +
                 (c.out == DType::bf16 ? " to bf16" : ""),
         .kernels = {"matmul"},
         .inputs = inputs,
         .run =
             [=](const auto& in) {
               return Variable(kernels::matmul(in[0].value(), in[1].value(),
                                               c.bias ? in[2].value() : Tensor(),
                                               {.transpose_a = c.ta,
                                                .transpose_b = c.tb,
                                                .activation = c.activation,
                                                .out_dtype = c.out}));
             },
         .reference =
             [=](const auto& in) {
               Doubles y = matmul_reference(in[0], in[1], m);
               for (size_t i = 0; i < y.size(); ++i)
                 y[i] = activation_of(c.activation, y[i] + (c.bias ? in[2][i % c.N] : 0.0));
               return y;
             },
         .low_precision = {DType::bf16},
         .tolerance = tolerance,
         .gradient = false});
  }
}

void add_linear_rows(std::vector<OpCase>& rows) {
  const MatmulShape m{.M = 4, .K = 6, .N = 5, .transpose_b = true};
  for (Activation a : {Activation::none, Activation::relu, Activation::gelu, Activation::gelu_tanh,
                       Activation::silu}) {
    rows.push_back(
        {.name = "linear " + std::string(kernels::activation_name(a)),
         .kernels = {"matmul", "matmul_into", "linear_backward_weights", "sum_to_shape",
                     "activation_backward"},
         // Inputs away from zero keep the pre-activations off ReLU's kink for this seed.
         .inputs = {distinct(Shape{4, 6}, 0.05), uniform(Shape{5, 6}), in_f32(uniform(Shape{5}))},
         .run = [=](const auto& in) { return linear(in[0], in[1], in[2], {.activation = a}); },
         .reference =
             [=](const auto& in) {
               Doubles y = matmul_reference(in[0], in[1], m);
               for (size_t i = 0; i < y.size(); ++i) y[i] = activation_of(a, y[i] + in[2][i % 5]);
               return y;
             },
         .low_precision = {DType::bf16}});
  }
  // Without a bias, and for a rank-3 input (flattened to rows).
  const MatmulShape rows3{.M = 6, .K = 6, .N = 5, .transpose_b = true};
  rows.push_back(
      {.name = "linear no bias rank 3",
       .kernels = {"matmul", "matmul_into", "linear_backward_weights"},
       .inputs = {uniform(Shape{2, 3, 6}), uniform(Shape{5, 6})},
       .run = [](const auto& in) { return linear(in[0], in[1], Variable()); },
       .reference = [=](const auto& in) { return matmul_reference(in[0], in[1], rows3); },
       .low_precision = {DType::bf16}});
}

// conv2d(x, w, bias) through autograd, its gradients written out.
OpCase conv_row(const std::string& name, const Shape& xs, const Shape& ws,
                const kernels::Conv2dGeometry& g, std::vector<DType> low_precision) {
  const int64_t O = ws[3];
  return {.name = name,
          .kernels = {"conv2d_forward", "conv2d_backward_data", "conv2d_backward_weights",
                      "activation_backward"},
          .inputs = {uniform(xs), uniform(ws), in_f32(uniform(Shape{O}))},
          .run =
              [=](const auto& in) {
                return conv2d(in[0], in[1], in[2], {.geometry = g, .compute_dtype = in[0].dtype()});
              },
          .reference =
              [=](const auto& in) {
                Doubles y = conv2d_reference(in[0], xs, in[1], ws, g);
                for (size_t i = 0; i < y.size(); ++i) y[i] += in[2][i % O];
                return y;
              },
          .low_precision = std::move(low_precision),
          // f32 sums of KH KW C products forward, KH KW O for the input's gradient.
          .tolerance =
              1e-6 *
              std::max(1.0, std::sqrt(static_cast<double>(ws[0] * ws[1] * std::max(ws[2], ws[3])))),
          .gradient_reference =
              [=](const auto& in, const Doubles& dy) {
                Doubles db(static_cast<size_t>(O), 0.0);
                for (size_t i = 0; i < dy.size(); ++i) db[i % O] += dy[i];
                return std::vector<Doubles>{conv2d_backward_data_reference(dy, in[1], ws, xs, g),
                                            conv2d_backward_weights_reference(in[0], xs, dy, ws, g),
                                            db};
              }};
}

void add_conv_rows(std::vector<OpCase>& rows) {
  const std::vector<DType> bf16{DType::bf16};
  const kernels::Conv2dGeometry same{.pad_h = 1, .pad_w = 1};
  rows.push_back(conv_row("conv2d s1 p0 d1", {2, 6, 5, 3}, {3, 3, 3, 4}, {}, bf16));
  rows.push_back(conv_row("conv2d s2 p1 d1", {2, 6, 5, 3}, {3, 3, 3, 4},
                          {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}, bf16));
  rows.push_back(conv_row("conv2d s1 p2 d2", {2, 6, 5, 3}, {3, 3, 3, 4},
                          {.pad_h = 2, .pad_w = 1, .dilation_h = 2}, bf16));
  rows.push_back(conv_row("conv2d 1 channel padded", {2, 5, 5, 1}, {3, 3, 1, 4}, same, {}));
  // Rows of 8 pixels x 32 channels: the narrow kernel's f32 rows written and
  // read in place (bf16 through its row copies).
  rows.push_back(conv_row("conv2d 1 channel to 32", {2, 8, 8, 1}, {3, 3, 1, 32}, same, bf16));
  rows.push_back(conv_row("conv2d 3x2 kernel strides 2 3", {2, 9, 11, 4}, {3, 2, 4, 6},
                          {.stride_h = 2, .stride_w = 3, .pad_h = 1}, {}));
  rows.push_back(conv_row("conv2d dilated 2 both ways", {1, 10, 10, 2}, {3, 3, 2, 3},
                          {.pad_h = 2, .pad_w = 2, .dilation_h = 2, .dilation_w = 2}, {}));
  rows.push_back(conv_row("conv2d 32 to 64 channels", {4, 14, 14, 32}, {3, 3, 32, 64}, same, {}));
  rows.push_back(conv_row("conv2d 1x1x1", {1, 1, 1, 1}, {1, 1, 1, 1}, {}, {}));
  rows.push_back(conv_row("conv2d 16 channels", {2, 8, 8, 16}, {3, 3, 16, 16}, same, bf16));
  rows.push_back(conv_row("conv2d 3 to 7 strided", {3, 7, 5, 3}, {3, 3, 3, 7},
                          {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}, bf16));
  // The shapes the GPU comparisons used: a 5x3 kernel dilated in height, a
  // strided 1x1.
  rows.push_back(conv_row("conv2d 9x7 padded", {2, 9, 7, 3}, {3, 3, 3, 5}, same, bf16));
  rows.push_back(conv_row("conv2d 4 to 8 strided", {3, 12, 10, 4}, {3, 3, 4, 8},
                          {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}, bf16));
  rows.push_back(conv_row("conv2d 5x3 dilated in height", {1, 11, 11, 2}, {5, 3, 2, 3},
                          {.pad_h = 2, .dilation_h = 2}, bf16));
  rows.push_back(conv_row("conv2d 1x1 strided", {4, 8, 8, 16}, {1, 1, 16, 32},
                          {.stride_h = 2, .stride_w = 2}, bf16));
  // Inputs of up to 4 channels take the direct kernels (narrow_conv.h): the
  // cnn's first layer, output channels that are no multiple of 16, more
  // output channels than the weight gradient takes at once (256), and 5
  // channels, the first shape past them.
  rows.push_back(conv_row("conv2d 1 to 32 channels", {3, 28, 28, 1}, {3, 3, 1, 32}, same, bf16));
  rows.push_back(conv_row("conv2d 3 to 20 channels", {2, 7, 6, 3}, {3, 3, 3, 20}, same, bf16));
  rows.push_back(conv_row("conv2d 1 to 300 channels", {1, 4, 5, 1}, {2, 3, 1, 300}, {}, bf16));
  rows.push_back(conv_row("conv2d 5 channels", {2, 6, 7, 5}, {3, 3, 5, 6}, same, bf16));
  // The forward kernel's own options at those shapes: the fused ReLU, no
  // bias, and the result in f32 or in the operands' dtype.
  struct Forward {
    Shape x, w;
    kernels::Conv2dGeometry g;
    bool bias;
    Activation activation;
  };
  const Forward forwards[] = {
      {{2, 9, 7, 3}, {3, 3, 3, 5}, same, true, Activation::relu},
      {{3, 12, 10, 4},
       {3, 3, 4, 8},
       {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1},
       false,
       Activation::none},
      {{1, 11, 11, 2}, {5, 3, 2, 3}, {.pad_h = 2, .dilation_h = 2}, true, Activation::none},
      {{4, 8, 8, 16}, {1, 1, 16, 32}, {.stride_h = 2, .stride_w = 2}, true, Activation::none}};
  for (const Forward& f : forwards)
    for (bool to_f32 : {true, false}) {
      const int64_t O = f.w[3];
      std::vector<OpInput> inputs{uniform(f.x), uniform(f.w, -0.5, 0.5)};
      if (f.bias) inputs.push_back(in_f32(uniform(Shape{O})));
      rows.push_back(
          {.name = "conv2d_forward kernel " + f.x.to_string() + " * " + f.w.to_string() +
                   (f.bias ? " bias " : " ") + std::string(kernels::activation_name(f.activation)) +
                   (to_f32 ? " to f32" : " to its dtype"),
           .kernels = {"conv2d_forward"},
           .inputs = inputs,
           .run =
               [=](const auto& in) {
                 const Tensor& x = in[0].value();
                 return Variable(
                     kernels::conv2d_forward(x, in[1].value(), f.bias ? in[2].value() : Tensor(),
                                             f.g, f.activation, to_f32 ? DType::f32 : x.dtype()));
               },
           .reference =
               [=](const auto& in) {
                 Doubles y = conv2d_reference(in[0], f.x, in[1], f.w, f.g);
                 for (size_t i = 0; i < y.size(); ++i)
                   y[i] = activation_of(f.activation, y[i] + (f.bias ? in[2][i % O] : 0.0));
                 return y;
               },
           .low_precision = {DType::bf16},
           .tolerance =
               1e-6 * std::max(1.0, std::sqrt(static_cast<double>(f.w[0] * f.w[1] * f.w[2]))),
           .gradient = false});
    }
  const Shape small{1, 5, 5, 2}, sw{3, 3, 2, 3};
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
                        Doubles y = conv2d_reference(in[0], small, in[1], sw, same);
                        for (size_t i = 0; i < y.size(); ++i)
                          y[i] = std::max(0.0, y[i] + in[2][i % 3]);
                        return y;
                      },
                  .low_precision = {DType::bf16}});
}

// conv2d_max_pool_relu through autograd: a first layer's convolution
// pooling its own output (fused), its gradients written out: the pooled
// gradient where the maximum passed the ReLU, routed to that maximum, then
// through the convolution. In f32 only: in bf16 the convolution's output is
// rounded before the pooling compares it, so near ties route gradients to
// other positions than the double reference does (bf16 is checked against
// the composed ops bit for bit, ConvMaxPool.* and Functions.*, and those ops
// have their own bf16 rows).
OpCase conv_max_pool_row(const Shape& xs, const Shape& ws, const kernels::Pool2dGeometry& pool) {
  const int64_t O = ws[3];
  const kernels::Conv2dGeometry same{.pad_h = 1, .pad_w = 1};
  const Shape zs = kernels::conv2d_output_shape(xs, ws, same);
  // The convolution's output, bias added, in double.
  const auto convolved = [=](const std::vector<Doubles>& in) {
    Doubles z = conv2d_reference(in[0], xs, in[1], ws, same);
    for (size_t i = 0; i < z.size(); ++i) z[i] += in[2][i % O];
    return z;
  };
  return {.name = "conv2d_max_pool_relu " + xs.to_string() + " * " + ws.to_string() + " k" +
                  std::to_string(pool.kernel_h) + "x" + std::to_string(pool.kernel_w),
          .kernels = {"conv2d_max_pool_relu_forward", "conv2d_max_pool_backward_weights",
                      "max_pool2d_backward", "conv2d_backward_data"},
          .inputs = {uniform(xs), uniform(ws), in_f32(uniform(Shape{O}))},
          .run =
              [=](const auto& in) {
                return conv2d_max_pool_relu(
                    in[0], in[1], in[2], {.geometry = same, .compute_dtype = in[0].dtype()}, pool);
              },
          .reference =
              [=](const auto& in) {
                Doubles y = pool2d_reference(convolved(in), zs, pool, true);
                for (double& v : y) v = std::max(0.0, v);
                return y;
              },
          .low_precision = {},
          .tolerance = 1e-6 * std::sqrt(static_cast<double>(ws[0] * ws[1] * ws[2])),
          .gpu = false,
          .gradient_reference =
              [=](const auto& in, const Doubles& dy) {
                const Doubles z = convolved(in);
                const Doubles y = pool2d_reference(z, zs, pool, true);
                Doubles passed = dy;
                for (size_t i = 0; i < passed.size(); ++i)
                  if (y[i] <= 0.0) passed[i] = 0.0;
                const Doubles dz = max_pool2d_backward_reference(z, zs, passed, pool);
                Doubles db(static_cast<size_t>(O), 0.0);
                for (size_t i = 0; i < dz.size(); ++i) db[i % O] += dz[i];
                return std::vector<Doubles>{
                    conv2d_backward_data_reference(dz, in[1], ws, xs, same),
                    conv2d_backward_weights_reference(in[0], xs, dz, ws, same), db};
              }};
}

// max_pool2d through autograd on distinct values (one maximum per window).
OpCase max_pool_row(const Shape& xs, const kernels::Pool2dGeometry& g,
                    std::vector<DType> low_precision = {DType::bf16, DType::f16}) {
  return {.name = "max_pool2d " + xs.to_string() + " k" + std::to_string(g.kernel_h) + "x" +
                  std::to_string(g.kernel_w) + " s" + std::to_string(g.stride_h) + " p" +
                  std::to_string(g.pad_h),
          .kernels = {"max_pool2d_forward", "max_pool2d_backward"},
          .inputs = {distinct(xs, 0.0)},
          .run = [=](const auto& in) { return max_pool2d(in[0], g); },
          .reference = [=](const auto& in) { return pool2d_reference(in[0], xs, g, true); },
          .low_precision = std::move(low_precision),
          .gradient_reference =
              [=](const auto& in, const Doubles& dy) {
                return std::vector<Doubles>{max_pool2d_backward_reference(in[0], xs, dy, g)};
              }};
}

void add_pool_rows(std::vector<OpCase>& rows) {
  const kernels::Pool2dGeometry three{
      .kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
  // The cnn's first layer (its output channels in whole AVX-512 blocks),
  // and 3 channels to 20 under 3x3 windows with a row and column left over.
  rows.push_back(conv_max_pool_row({2, 8, 8, 1}, {3, 3, 1, 32}, {}));
  rows.push_back(conv_max_pool_row({2, 7, 8, 3}, {3, 3, 3, 20},
                                   {.kernel_h = 3, .kernel_w = 3, .stride_h = 3, .stride_w = 3}));
  rows.push_back(max_pool_row({2, 6, 5, 3}, {}));
  rows.push_back(max_pool_row({2, 6, 5, 3}, three));
  rows.push_back(max_pool_row({3, 9, 9, 5}, three, {}));
  rows.push_back(max_pool_row({2, 6, 6, 4}, {.kernel_h = 3, .kernel_w = 2, .stride_h = 1}, {}));
  rows.push_back(max_pool_row({2, 28, 28, 32}, {}, {}));
  rows.push_back(max_pool_row({2, 8, 6, 16}, {}, {DType::bf16}));
  // 2x2 windows over padding, at strides 1 and 2: the AVX-512 run takes
  // the windows inside the image, the general loop those at the edges.
  rows.push_back(max_pool_row(
      {2, 5, 6, 16},
      {.kernel_h = 2, .kernel_w = 2, .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1},
      {DType::bf16}));
  rows.push_back(max_pool_row({2, 6, 7, 32}, {.pad_h = 1, .pad_w = 1}, {DType::bf16}));
  // More than 64 channels (compared 64 at a time), and a window of more than
  // 256 positions (its workspace is i32).
  rows.push_back(max_pool_row({2, 4, 4, 70}, {}, {DType::bf16}));
  rows.push_back(max_pool_row({1, 18, 17, 3}, {.kernel_h = 17, .kernel_w = 16, .stride_h = 1}, {}));
  // Windows of 255 positions (the last a u8 workspace holds beside its
  // no-position marker) and 256 (i32), and a stride past the window.
  rows.push_back(max_pool_row({1, 16, 17, 3}, {.kernel_h = 15, .kernel_w = 17, .stride_h = 1}, {}));
  rows.push_back(max_pool_row({1, 16, 16, 3}, {.kernel_h = 16, .kernel_w = 16, .stride_h = 1}, {}));
  rows.push_back(max_pool_row({2, 9, 9, 3}, {.stride_h = 3, .stride_w = 3}, {DType::bf16}));
  const Shape img{2, 5, 7, 3};
  const kernels::Pool2dGeometry avg{
      .kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
  rows.push_back(
      {.name = "avg_pool2d k3x2 s2 p1",
       .kernels = {"avg_pool2d", "avg_pool2d_backward"},
       .inputs = {uniform(img)},
       .run = [=](const auto& in) { return avg_pool2d(in[0], avg); },
       .reference = [=](const auto& in) { return pool2d_reference(in[0], img, avg, false); }});
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
  add_matmul_kernel_rows(rows);
  add_linear_rows(rows);
  add_conv_rows(rows);
  add_pool_rows(rows);
}

}  // namespace tandem::testing
