// oneDNN-backed kernels against naive double references, over odd shapes,
// transposes, strides, padding, dilation, f32 and bf16.
#include <gtest/gtest.h>

#include <cmath>

#include "support/gradcheck.h"
#include "support/reference.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/kernels/conv.h"
#include "tandem/kernels/detail/onednn.h"
#include "tandem/kernels/matmul.h"
#include "tandem/kernels/pool.h"

namespace tandem {
namespace {

using testing::expect_close;
using testing::random_tensor;
using testing::to_doubles;

struct MatmulCase {
  int64_t M, K, N;
  bool transpose_a, transpose_b, bias;
  kernels::Activation activation;
  DType dtype;
};

class MatmulTest : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(MatmulTest, MatchesNaiveReference) {
  const MatmulCase c = GetParam();
  const Tensor a32 = random_tensor(c.transpose_a ? Shape{c.K, c.M} : Shape{c.M, c.K}, -1, 1, 1);
  const Tensor b32 = random_tensor(c.transpose_b ? Shape{c.N, c.K} : Shape{c.K, c.N}, -1, 1, 2);
  const Tensor bias = c.bias ? random_tensor(Shape{c.N}, -1, 1, 3) : Tensor();
  // The reference sees the operands as rounded to the compute dtype.
  const Tensor a = a32.to(c.dtype), b = b32.to(c.dtype);
  const Tensor out = kernels::matmul(
      a, b, bias,
      {.transpose_a = c.transpose_a, .transpose_b = c.transpose_b, .activation = c.activation});
  ASSERT_EQ(out.shape(), (Shape{c.M, c.N}));
  std::vector<double> expected = testing::matmul_reference(a, b, c.transpose_a, c.transpose_b);
  const std::vector<double> bias_values = c.bias ? to_doubles(bias) : std::vector<double>();
  for (int64_t m = 0; m < c.M; ++m) {
    for (int64_t n = 0; n < c.N; ++n) {
      double& v = expected[m * c.N + n];
      if (c.bias) v += bias_values[n];
      if (c.activation == kernels::Activation::relu) v = std::max(v, 0.0);
      if (c.activation == kernels::Activation::gelu)
        v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    }
  }
  // Accumulation is f32 in both paths; allow for K-term rounding.
  const double atol = 1e-5 * std::sqrt(static_cast<double>(c.K)) + 1e-5;
  expect_close(to_doubles(out), expected, atol, 1e-4, "matmul");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatmulTest,
    ::testing::Values(
        MatmulCase{1, 1, 1, false, false, false, kernels::Activation::none, DType::f32},
        MatmulCase{3, 5, 7, false, false, true, kernels::Activation::none, DType::f32},
        MatmulCase{17, 31, 13, true, false, false, kernels::Activation::none, DType::f32},
        MatmulCase{17, 31, 13, false, true, true, kernels::Activation::relu, DType::f32},
        MatmulCase{16, 64, 33, true, true, false, kernels::Activation::gelu, DType::f32},
        MatmulCase{128, 784, 10, false, true, true, kernels::Activation::none, DType::f32},
        MatmulCase{5, 37, 11, false, false, true, kernels::Activation::relu, DType::bf16},
        MatmulCase{64, 128, 48, true, true, false, kernels::Activation::none, DType::bf16},
        MatmulCase{7, 0, 5, false, false, true, kernels::Activation::relu, DType::f32},
        MatmulCase{0, 3, 5, false, false, false, kernels::Activation::none, DType::f32}));

TEST(Matmul, Bf16OutputAndErrors) {
  const Tensor a = random_tensor(Shape{4, 6}, -1, 1, 1).to(DType::bf16);
  const Tensor b = random_tensor(Shape{6, 3}, -1, 1, 2).to(DType::bf16);
  const Tensor out = kernels::matmul(a, b, {}, {.out_dtype = DType::bf16});
  EXPECT_EQ(out.dtype(), DType::bf16);
  expect_close(to_doubles(out), testing::matmul_reference(a, b, false, false), 0.02, 0.01,
               "bf16 out");
  // f32 operands into a bf16 output (oneDNN 2.6 has no such primitive):
  // the f32 result with bias and activation, rounded once.
  const Tensor a32 = random_tensor(Shape{17, 33}, -1, 1, 4),
               b32 = random_tensor(Shape{33, 9}, -1, 1, 5);
  const Tensor bias = random_tensor(Shape{9}, -1, 1, 6);
  const kernels::MatmulOptions relu{.activation = kernels::Activation::relu};
  const Tensor narrow = kernels::matmul(
      a32, b32, bias, {.activation = kernels::Activation::relu, .out_dtype = DType::bf16});
  EXPECT_EQ(narrow.dtype(), DType::bf16);
  EXPECT_EQ(narrow.to_floats(), kernels::matmul(a32, b32, bias, relu).to(DType::bf16).to_floats());
  EXPECT_THROW(
      kernels::matmul(random_tensor(Shape{4, 6}, 0, 1, 1), random_tensor(Shape{5, 3}, 0, 1, 1)),
      ShapeError);
  EXPECT_THROW(kernels::matmul(a, random_tensor(Shape{6, 3}, 0, 1, 1)), ShapeError);
  EXPECT_THROW(kernels::matmul(random_tensor(Shape{4}, 0, 1, 1), b), ShapeError);
  EXPECT_THROW(kernels::matmul(a, b, random_tensor(Shape{4}, 0, 1, 1)), ShapeError);
}

TEST(Matmul, PrimitivesAreCachedByShape) {
  const Tensor a = random_tensor(Shape{9, 10}, -1, 1, 1),
               b = random_tensor(Shape{10, 11}, -1, 1, 2);
  kernels::matmul(a, b);
  const size_t after_first = kernels::detail::cache_size();
  kernels::matmul(a, b);
  EXPECT_EQ(kernels::detail::cache_size(), after_first);
  kernels::matmul(random_tensor(Shape{8, 10}, -1, 1, 1), b);
  EXPECT_EQ(kernels::detail::cache_size(), after_first + 1);
  // oneDNN splits the work for the thread count it was created with, so a
  // different team size needs its own primitive (else 2 threads run as 1).
  const int saved = num_threads();
  set_num_threads(saved + 1);
  kernels::matmul(a, b);
  set_num_threads(saved);
  EXPECT_EQ(kernels::detail::cache_size(), after_first + 2);
}

struct ConvCase {
  Shape x, w;
  kernels::Conv2dGeometry geometry;
  DType dtype;
};

class ConvTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvTest, ForwardAndBackwardMatchReferences) {
  const ConvCase c = GetParam();
  const Tensor x = random_tensor(c.x, -1, 1, 4).to(c.dtype);
  const Tensor w = random_tensor(c.w, -1, 1, 5).to(c.dtype);
  const Tensor bias = random_tensor(Shape{c.w[3]}, -1, 1, 6);
  const double rtol = c.dtype == DType::f32 ? 1e-4 : 1e-2;
  const double k = static_cast<double>(c.w[0] * c.w[1] * c.w[2]);
  const double atol = (c.dtype == DType::f32 ? 1e-5 : 1e-2) * std::sqrt(k) + 1e-5;

  const Tensor y = kernels::conv2d_forward(x, w, bias, c.geometry);
  std::vector<double> expected = testing::conv2d_reference(x, w, c.geometry);
  const std::vector<double> b = to_doubles(bias);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] += b[i % b.size()];
  expect_close(to_doubles(y), expected, atol, rtol, "conv2d forward");

  const Tensor relu_y = kernels::conv2d_forward(x, w, bias, c.geometry, kernels::Activation::relu);
  for (double& v : expected) v = std::max(v, 0.0);
  expect_close(to_doubles(relu_y), expected, atol, rtol, "conv2d forward + relu");

  const Tensor dy = random_tensor(y.shape(), -1, 1, 7).to(c.dtype);
  const Tensor dx = kernels::conv2d_backward_data(dy, w, c.x, c.geometry);
  expect_close(to_doubles(dx), testing::conv2d_backward_data_reference(dy, w, c.x, c.geometry),
               atol, rtol, "conv2d backward data");

  Tensor dw = Tensor::empty(c.w);
  Tensor db = Tensor::empty(Shape{c.w[3]});
  kernels::conv2d_backward_weights(x, dy, c.geometry, dw, &db);
  const double rows = static_cast<double>(y.numel() / c.w[3]);
  const double atol_w = (c.dtype == DType::f32 ? 1e-5 : 1e-2) * std::sqrt(rows) + 1e-5;
  expect_close(to_doubles(dw), testing::conv2d_backward_weights_reference(x, dy, c.w, c.geometry),
               atol_w, rtol, "conv2d backward weights");
  std::vector<double> expected_db(static_cast<size_t>(c.w[3]), 0.0);
  const std::vector<double> dys = to_doubles(dy);
  for (size_t i = 0; i < dys.size(); ++i) expected_db[i % expected_db.size()] += dys[i];
  expect_close(to_doubles(db), expected_db, atol_w, rtol, "conv2d backward bias");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvTest,
    ::testing::Values(
        ConvCase{Shape{2, 5, 5, 1}, Shape{3, 3, 1, 4}, {.pad_h = 1, .pad_w = 1}, DType::f32},
        ConvCase{Shape{3, 7, 6, 3}, Shape{3, 3, 3, 5}, {}, DType::f32},
        ConvCase{Shape{2, 9, 11, 4},
                 Shape{3, 2, 4, 6},
                 {.stride_h = 2, .stride_w = 3, .pad_h = 1},
                 DType::f32},
        ConvCase{Shape{1, 10, 10, 2},
                 Shape{3, 3, 2, 3},
                 {.pad_h = 2, .pad_w = 2, .dilation_h = 2, .dilation_w = 2},
                 DType::f32},
        ConvCase{Shape{4, 14, 14, 32}, Shape{3, 3, 32, 64}, {.pad_h = 1, .pad_w = 1}, DType::f32},
        ConvCase{Shape{1, 1, 1, 1}, Shape{1, 1, 1, 1}, {}, DType::f32},
        ConvCase{Shape{2, 8, 8, 16}, Shape{3, 3, 16, 16}, {.pad_h = 1, .pad_w = 1}, DType::bf16},
        ConvCase{Shape{3, 7, 5, 3},
                 Shape{3, 3, 3, 7},
                 {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1},
                 DType::bf16}));

TEST(Conv, ShapeErrorsNameTheProblem) {
  const Tensor x = random_tensor(Shape{1, 5, 5, 3}, -1, 1, 1);
  try {
    kernels::conv2d_forward(x, random_tensor(Shape{3, 3, 2, 4}, -1, 1, 1), {}, {});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("3 channels"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kernels::conv2d_forward(x, random_tensor(Shape{7, 7, 3, 4}, -1, 1, 1), {}, {}),
               ShapeError);
  EXPECT_THROW(kernels::conv2d_output_shape(Shape{1, 5, 5}, Shape{3, 3, 3, 4}, {}), ShapeError);
  EXPECT_THROW(kernels::conv2d_output_shape(Shape{1, 5, 5, 3}, Shape{3, 3, 3, 4}, {.stride_h = 0}),
               InvalidArgument);
}

struct PoolCase {
  Shape x;
  kernels::Pool2dGeometry geometry;
  DType dtype;
};

class PoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(PoolTest, ForwardAndBackwardMatchReferences) {
  const PoolCase c = GetParam();
  // Distinct values: no ties, so the arg-max is unique.
  const Tensor x = testing::distinct_tensor(c.x, 0.01f, 9).to(c.dtype);
  const kernels::MaxPoolResult r = kernels::max_pool2d_forward(x, c.geometry, true);
  const std::vector<double> expected = testing::max_pool2d_reference(x, c.geometry);
  expect_close(to_doubles(r.y), expected, 0, 0, "max_pool2d forward");
  const Tensor inference = kernels::max_pool2d_forward(x, c.geometry, false).y;
  expect_close(to_doubles(inference), expected, 0, 0, "max_pool2d inference");
  EXPECT_FALSE(kernels::max_pool2d_forward(x, c.geometry, false).workspace.defined());

  // Backward: each dy goes to the input holding its window's maximum.
  const Tensor dy = random_tensor(r.y.shape(), -1, 1, 3).to(c.dtype);
  const Tensor dx = kernels::max_pool2d_backward(dy, r.workspace, c.x, c.geometry);
  std::vector<double> expected_dx(static_cast<size_t>(c.x.numel()), 0.0);
  const std::vector<double> xs = to_doubles(x), dys = to_doubles(dy);
  const Shape ys = r.y.shape();
  const auto& g = c.geometry;
  for (int64_t n = 0; n < ys[0]; ++n)
    for (int64_t oh = 0; oh < ys[1]; ++oh)
      for (int64_t ow = 0; ow < ys[2]; ++ow)
        for (int64_t ch = 0; ch < ys[3]; ++ch) {
          int64_t best = -1;
          for (int64_t kh = 0; kh < g.kernel_h; ++kh)
            for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
              const int64_t ih = oh * g.stride_h - g.pad_h + kh,
                            iw = ow * g.stride_w - g.pad_w + kw;
              if (ih < 0 || ih >= c.x[1] || iw < 0 || iw >= c.x[2]) continue;
              const int64_t idx = ((n * c.x[1] + ih) * c.x[2] + iw) * c.x[3] + ch;
              if (best < 0 || xs[idx] > xs[best]) best = idx;
            }
          expected_dx[best] += dys[((n * ys[1] + oh) * ys[2] + ow) * ys[3] + ch];
        }
  const double tol = c.dtype == DType::f32 ? 1e-6 : 2e-2;
  expect_close(to_doubles(dx), expected_dx, tol, tol, "max_pool2d backward");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PoolTest,
    ::testing::Values(
        PoolCase{Shape{2, 4, 4, 3}, {}, DType::f32}, PoolCase{Shape{1, 7, 5, 2}, {}, DType::f32},
        PoolCase{
            Shape{3, 9, 9, 5},
            {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1},
            DType::f32},
        PoolCase{Shape{2, 6, 6, 4},
                 {.kernel_h = 3, .kernel_w = 2, .stride_h = 1, .stride_w = 2},
                 DType::f32},
        PoolCase{Shape{2, 28, 28, 32}, {}, DType::f32},
        PoolCase{Shape{2, 8, 6, 16}, {}, DType::bf16}));

TEST(Pool, BadGeometryAndMissingWorkspace) {
  const Tensor x = random_tensor(Shape{1, 4, 4, 1}, -1, 1, 1);
  EXPECT_THROW(kernels::max_pool2d_forward(x, {.kernel_h = 5, .kernel_w = 5}, true), ShapeError);
  EXPECT_THROW(kernels::max_pool2d_forward(x, {.kernel_h = 0}, true), InvalidArgument);
  const Tensor y = kernels::max_pool2d_forward(x, {}, false).y;
  EXPECT_THROW(kernels::max_pool2d_backward(y, Tensor(), x.shape(), {}), ShapeError);
}

}  // namespace
}  // namespace tandem
