// oneDNN-backed kernels beyond their op-table rows (tests/support/op_rows_dense.cc,
// which hold their values and gradients over odd shapes, transposes, strides,
// padding and dilation): bf16 outputs, primitive caching, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "support/gradcheck.h"
#include "support/reference.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/kernels/activation.h"
#include "tandem/kernels/conv.h"
#include "tandem/kernels/detail/onednn.h"
#include "tandem/kernels/matmul.h"
#include "tandem/kernels/pool.h"

namespace tandem {
namespace {

using testing::expect_close;
using testing::random_tensor;
using testing::to_doubles;

TEST(Matmul, Bf16OutputAndErrors) {
  const Tensor a = random_tensor(Shape{4, 6}, -1, 1, 1).to(DType::bf16);
  const Tensor b = random_tensor(Shape{6, 3}, -1, 1, 2).to(DType::bf16);
  const Tensor out = kernels::matmul(a, b, {}, {.out_dtype = DType::bf16});
  EXPECT_EQ(out.dtype(), DType::bf16);
  expect_close(to_doubles(out),
               testing::matmul_reference(to_doubles(a), to_doubles(b), {.M = 4, .K = 6, .N = 3}),
               0.02, 0.01, "bf16 out");
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

// A product with a GELU epilogue gives the bits of the product followed by
// the separate GELU, f32 and bf16, matmul and convolution: checkpointing
// recomputes a forward fused (no gradient recorded) that was recorded
// unfused, and promises the same gradients.
TEST(Matmul, GeluEpilogueGivesTheSeparateOpsBits) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Tensor a = random_tensor(Shape{37, 48}, -2, 2, 1).to(dtype);
    const Tensor b = random_tensor(Shape{48, 40}, -2, 2, 2).to(dtype);
    const Tensor bias = random_tensor(Shape{40}, -1, 1, 3);
    const Tensor x = random_tensor(Shape{2, 6, 6, 8}, -2, 2, 4).to(dtype);
    const Tensor w = random_tensor(Shape{3, 3, 8, 16}, -0.5, 0.5, 5).to(dtype);
    const kernels::Conv2dGeometry g{.pad_h = 1, .pad_w = 1};
    for (const kernels::Activation form :
         {kernels::Activation::gelu, kernels::Activation::gelu_tanh}) {
      const Tensor fused = kernels::matmul(a, b, bias, {.activation = form, .out_dtype = dtype});
      const Tensor separate =
          kernels::activate(form, kernels::matmul(a, b, bias, {.out_dtype = dtype}));
      EXPECT_EQ(to_doubles(fused), to_doubles(separate)) << dtype_name(dtype);
      // Operands into an f32 output (bf16 operands: the product widened).
      const Tensor fused_f32 = kernels::matmul(a, b, bias, {.activation = form});
      const Tensor separate_f32 = kernels::activate(form, kernels::matmul(a, b, bias));
      EXPECT_EQ(to_doubles(fused_f32), to_doubles(separate_f32)) << dtype_name(dtype) << " to f32";
      const Tensor conv_fused = kernels::conv2d_forward(x, w, {}, g, form, dtype);
      const Tensor conv_separate =
          kernels::activate(form, kernels::conv2d_forward(x, w, {}, g, {}, dtype));
      EXPECT_EQ(to_doubles(conv_fused), to_doubles(conv_separate)) << dtype_name(dtype);
      EXPECT_EQ(to_doubles(kernels::conv2d_forward(x, w, {}, g, form, DType::f32)),
                to_doubles(kernels::activate(form, kernels::conv2d_forward(x, w, {}, g))))
          << dtype_name(dtype) << " convolution to f32";
    }
  }
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

TEST(Pool, BadGeometryAndMissingWorkspace) {
  const Tensor x = random_tensor(Shape{1, 4, 4, 1}, -1, 1, 1);
  EXPECT_THROW(kernels::max_pool2d_forward(x, {.kernel_h = 5, .kernel_w = 5}, true), ShapeError);
  EXPECT_THROW(kernels::max_pool2d_forward(x, {.kernel_h = 0}, true), InvalidArgument);
  const Tensor y = kernels::max_pool2d_forward(x, {}, false).y;
  EXPECT_THROW(kernels::max_pool2d_backward(y, Tensor(), x.shape(), {}), ShapeError);
  // A workspace of another shape, or another index width, is refused by name.
  const kernels::MaxPoolResult big = kernels::max_pool2d_forward(
      random_tensor(Shape{1, 17, 17, 1}, -1, 1, 1), {.kernel_h = 17, .kernel_w = 17}, true);
  EXPECT_EQ(big.workspace.dtype(), DType::i32);
  try {
    kernels::max_pool2d_backward(y, big.workspace, x.shape(), {});
    ADD_FAILURE() << "a mismatched workspace was taken";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("workspace of a training-mode forward"), std::string::npos)
        << e.what();
  }
}

// Ties go to the first position of the window (row-major), as PyTorch's and
// the reference's; the first NaN in a window is its maximum and gets the
// gradient. One channel and 5 (the general loop), 16 (AVX-512's 2x2 run).
TEST(Pool, TiesGoToTheFirstMaximumAndTheFirstNaNWins) {
  // Window 0: 1 3 / 2 3, its maximum at (0, 1); window 1: 2 NaN / 5 NaN,
  // its first NaN at (0, 3).
  const std::vector<float> pattern{1.0f, 3.0f, 2.0f, NAN, 2.0f, 3.0f, 5.0f, NAN};
  for (const int64_t C : {1, 5, 16}) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(::testing::Message() << C << " channels " << dtype_name(dtype));
      std::vector<float> values;
      for (const float v : pattern) values.insert(values.end(), static_cast<size_t>(C), v);
      const Tensor x = Tensor::from_floats(Shape{1, 2, 4, C}, values).to(dtype);
      const kernels::MaxPoolResult r = kernels::max_pool2d_forward(x, {}, true);
      const std::vector<float> y = r.y.to_floats();
      for (int64_t c = 0; c < C; ++c) {
        EXPECT_EQ(y[c], 3.0f);
        EXPECT_TRUE(std::isnan(y[C + c]));
      }
      const Tensor dy = Tensor::full(Shape{1, 1, 2, C}, 10.0f).to(dtype);
      const std::vector<float> dx =
          kernels::max_pool2d_backward(dy, r.workspace, x.shape(), {}).to_floats();
      for (int64_t i = 0; i < 8; ++i)
        for (int64_t c = 0; c < C; ++c)
          EXPECT_EQ(dx[i * C + c], i == 1 || i == 3 ? 10.0f : 0.0f) << i << " " << c;
    }
  }
}

// Windows over padding whose values in the image are all -inf: the
// gradient goes to the first position in the image, as the reference's
// (a position in the padding wrote outside dx).
TEST(Pool, WindowsOfMinusInfinityOverPaddingRouteToTheImage) {
  const kernels::Pool2dGeometry padded{
      .kernel_h = 2, .kernel_w = 2, .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1};
  const kernels::Pool2dGeometry three{
      .kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1};
  for (const auto& [shape, geometry] : std::vector<std::pair<Shape, kernels::Pool2dGeometry>>{
           {Shape{1, 1, 1, 1}, padded}, {Shape{1, 3, 3, 2}, three}}) {
    SCOPED_TRACE(shape.to_string());
    const Tensor x = Tensor::full(shape, -INFINITY);
    const kernels::MaxPoolResult r = kernels::max_pool2d_forward(x, geometry, true);
    const Tensor dy = random_tensor(r.y.shape(), 1, 2, 60);
    const Tensor dx = kernels::max_pool2d_backward(dy, r.workspace, shape, geometry);
    // Several windows' gradients summed: in f32 against double.
    expect_close(
        to_doubles(dx),
        testing::max_pool2d_backward_reference(to_doubles(x), shape, to_doubles(dy), geometry),
        1e-6, 1e-6, "dx");
  }
}

}  // namespace
}  // namespace tandem
