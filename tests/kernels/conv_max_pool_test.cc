// A first layer's convolution with max pooling and ReLU in one pass
// (kernels::conv2d_max_pool_relu_forward and its weight gradient) against
// the ops composed, bit for bit: values, positions and gradients, on shapes
// that reach each path (16, 32, 48 and 64 output channels: the AVX-512
// weight gradient that skips the zero products, two vectors of channels at
// a time or one, taps in nines or not; 20 channels, 3-wide or 1-wide
// windows: the gradient rows built out), with rows and columns past the
// last whole window, windows 2 to 4 rows tall, strides, dilation, no bias
// and no input channels, on 1 and 3 threads, f32 and bf16 in and out, with
// ties, windows all negative, NaNs and infinities.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "support/errors.h"
#include "support/gradcheck.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/kernels/conv.h"
#include "tandem/kernels/pool.h"

namespace tandem {
namespace {

using kernels::Conv2dGeometry;
using kernels::Pool2dGeometry;
using testing::random_tensor;
using testing::storage_bytes;

struct Case {
  Shape x, w;
  Conv2dGeometry conv;
  Pool2dGeometry pool;
};

const Conv2dGeometry kSame{.pad_h = 1, .pad_w = 1};

std::vector<Case> cases() {
  return {
      {{3, 28, 28, 1}, {3, 3, 1, 32}, kSame, {}},  // the cnn's first layer
      {{2, 12, 10, 2}, {3, 3, 2, 64}, kSame, {}},
      {{2, 7, 9, 3}, {3, 3, 3, 20}, kSame, {}},  // a row and a column past the windows
      {{2, 11, 9, 4},
       {3, 2, 4, 32},
       {.stride_h = 2, .pad_h = 1},
       {.kernel_h = 3, .kernel_w = 3, .stride_h = 3, .stride_w = 3}},
      {{1, 9, 8, 1},
       {3, 3, 1, 16},
       {.pad_h = 2, .pad_w = 2, .dilation_h = 2, .dilation_w = 2},
       {.kernel_h = 2, .kernel_w = 1, .stride_h = 2, .stride_w = 1}},
      {{2, 6, 6, 1}, {3, 3, 1, 32}, {}, {}},
      {{2, 9, 8, 2}, {2, 2, 2, 32}, {}, {}},      // 8 taps: no nines
      {{2, 8, 10, 1}, {3, 3, 1, 16}, kSame, {}},  // output channels a vector at a time
      {{1, 7, 9, 3}, {2, 2, 3, 48}, {}, {}},
      // Windows two columns wide (the AVX-512 weight gradient) three and
      // four rows tall, over a convolution strided or dilated along its
      // rows; the second with rows and a column past the last window.
      {{2, 9, 12, 4},
       {3, 3, 4, 32},
       {.stride_w = 2, .pad_h = 1, .pad_w = 1},
       {.kernel_h = 3, .kernel_w = 2, .stride_h = 3, .stride_w = 2}},
      {{1, 10, 11, 2},
       {3, 3, 2, 16},
       {.pad_h = 2, .pad_w = 2, .dilation_h = 2, .dilation_w = 2},
       {.kernel_h = 4, .kernel_w = 2, .stride_h = 4, .stride_w = 2}},
  };
}

// Values on a grid of eighths (sums tie often), some negative enough that
// whole windows fall below zero; NaNs and infinities of both signs where
// asked.
Tensor grid_tensor(const Shape& shape, uint64_t seed, bool non_finite, DType dtype) {
  std::vector<float> v = random_tensor(shape, -1.5f, 1.0f, seed).to_floats();
  for (float& e : v) e = std::round(e * 8.0f) / 8.0f;
  if (non_finite) {
    const float kinds[] = {NAN, INFINITY, -INFINITY};
    for (size_t i = 7, k = 0; i < v.size(); i += 97, ++k) v[i] = kinds[k % 3];
  }
  return Tensor::from_floats(shape, v).to(dtype);
}

struct Precision {
  DType in, out;
  int threads;
  bool bias;
};

std::vector<Precision> precisions() {
  std::vector<Precision> out;
  for (DType in : {DType::f32, DType::bf16})
    for (DType to : {DType::f32, DType::bf16})
      for (int threads : {1, 3}) out.push_back({in, to, threads, threads == 1});
  return out;
}

TEST(ConvMaxPool, ForwardGivesTheComposedOpsBits) {
  uint64_t seed = 10;
  for (const Case& c : cases()) {
    for (const Precision& r : precisions()) {
      for (const bool non_finite : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << c.x.to_string() << " * " << c.w.to_string() << " " << dtype_name(r.in)
                     << " to " << dtype_name(r.out) << ", " << r.threads << " threads"
                     << (non_finite ? ", NaNs and infinities" : ""));
        NumThreadsScope threads(r.threads);
        const Tensor x = grid_tensor(c.x, ++seed, non_finite, r.in);
        const Tensor w = grid_tensor(c.w, ++seed, false, r.in);
        const Tensor bias =
            r.bias ? grid_tensor(Shape{c.w[3]}, ++seed, false, DType::f32) : Tensor();
        ASSERT_TRUE(kernels::conv2d_max_pool_fuses(x, c.pool, r.out));
        const Tensor z =
            kernels::conv2d_forward(x, w, bias, c.conv, kernels::Activation::none, r.out);
        const kernels::MaxPoolResult composed = kernels::max_pool2d_forward(z, c.pool, true, true);
        const kernels::MaxPoolResult fused =
            kernels::conv2d_max_pool_relu_forward(x, w, bias, c.conv, c.pool, r.out, true);
        EXPECT_EQ(fused.y.shape(), composed.y.shape());
        EXPECT_EQ(storage_bytes(fused.y), storage_bytes(composed.y)) << "y";
        EXPECT_EQ(storage_bytes(fused.workspace), storage_bytes(composed.workspace)) << "positions";
        const kernels::MaxPoolResult inference =
            kernels::conv2d_max_pool_relu_forward(x, w, bias, c.conv, c.pool, r.out, false);
        EXPECT_FALSE(inference.workspace.defined());
        EXPECT_EQ(storage_bytes(inference.y), storage_bytes(composed.y)) << "y without positions";
      }
    }
  }
}

// NaNs and infinities in x included: the composition's zero gradients
// meet them in products that make NaNs, which the fused pass must make too.
TEST(ConvMaxPool, WeightGradientGivesTheComposedOpsBits) {
  uint64_t seed = 200;
  for (const Case& c : cases()) {
    for (const Precision& r : precisions()) {
      const bool non_finite = r.threads == 3;
      SCOPED_TRACE(::testing::Message()
                   << c.x.to_string() << " * " << c.w.to_string() << " " << dtype_name(r.in) << ", "
                   << r.threads << " threads" << (non_finite ? ", NaNs and infinities" : ""));
      NumThreadsScope threads(r.threads);
      const Tensor x = grid_tensor(c.x, ++seed, non_finite, r.in);
      const Tensor w = grid_tensor(c.w, ++seed, false, r.in);
      const kernels::MaxPoolResult forward =
          kernels::conv2d_max_pool_relu_forward(x, w, Tensor(), c.conv, c.pool, r.in, true);
      const Tensor dy = random_tensor(forward.y.shape(), -1.0f, 1.0f, ++seed).to(r.in);
      const Shape z_shape = kernels::conv2d_output_shape(c.x, c.w, c.conv);
      const Tensor dz = kernels::max_pool2d_backward(dy, forward.workspace, z_shape, c.pool);
      Tensor dw[2] = {Tensor::empty(c.w), Tensor::empty(c.w)};
      Tensor db[2] = {Tensor::empty(Shape{c.w[3]}), Tensor::empty(Shape{c.w[3]})};
      kernels::conv2d_backward_weights(x, dz, c.conv, dw[0], r.bias ? &db[0] : nullptr);
      kernels::conv2d_max_pool_backward_weights(x, dy, forward.workspace, c.conv, c.pool, dw[1],
                                                r.bias ? &db[1] : nullptr);
      EXPECT_EQ(storage_bytes(dw[1]), storage_bytes(dw[0])) << "dw";
      if (r.bias) {
        EXPECT_EQ(storage_bytes(db[1]), storage_bytes(db[0])) << "db";
      }
    }
  }
}

// x without channels: the convolution is its bias, whose gradient the
// pooled gradient still gives.
TEST(ConvMaxPool, NoInputChannelsGiveTheComposedOpsBits) {
  const Shape xs{2, 6, 6, 0}, ws{3, 3, 0, 16};
  const Tensor x = Tensor::empty(xs), w = Tensor::empty(ws);
  const Tensor bias = grid_tensor(Shape{16}, 1, false, DType::f32);
  const kernels::MaxPoolResult fused =
      kernels::conv2d_max_pool_relu_forward(x, w, bias, kSame, {}, DType::f32, true);
  const kernels::MaxPoolResult composed = kernels::max_pool2d_forward(
      kernels::conv2d_forward(x, w, bias, kSame, kernels::Activation::none), {}, true, true);
  EXPECT_EQ(storage_bytes(fused.y), storage_bytes(composed.y));
  const Tensor dy = random_tensor(fused.y.shape(), -1.0f, 1.0f, 2);
  const Tensor dz = kernels::max_pool2d_backward(dy, composed.workspace,
                                                 kernels::conv2d_output_shape(xs, ws, kSame), {});
  Tensor dw[2] = {Tensor::empty(ws), Tensor::empty(ws)};
  Tensor db[2] = {Tensor::empty(Shape{16}), Tensor::empty(Shape{16})};
  kernels::conv2d_backward_weights(x, dz, kSame, dw[0], &db[0]);
  kernels::conv2d_max_pool_backward_weights(x, dy, fused.workspace, kSame, {}, dw[1], &db[1]);
  EXPECT_EQ(storage_bytes(db[1]), storage_bytes(db[0]));
  EXPECT_NE(db[1].to_floats(), std::vector<float>(16, 0.0f)) << "the bias has a gradient";
}

TEST(ConvMaxPool, RefusesWhatItCannotFuse) {
  using testing::error_message;
  using testing::expect_contains;
  const Tensor x = random_tensor(Shape{2, 8, 8, 1}, -1, 1, 1);
  const Tensor w = random_tensor(Shape{3, 3, 1, 8}, -1, 1, 2);
  const auto forward = [&](const Tensor& xs, const Pool2dGeometry& pool, DType out) {
    return error_message<InvalidArgument>(
        [&] { kernels::conv2d_max_pool_relu_forward(xs, w, Tensor(), kSame, pool, out, true); });
  };
  // Five channels (past the direct kernels), overlapping windows, padding, f16 out.
  const std::string wide = error_message<InvalidArgument>([&] {
    kernels::conv2d_max_pool_relu_forward(random_tensor(Shape{2, 8, 8, 5}, -1, 1, 3),
                                          random_tensor(Shape{3, 3, 5, 8}, -1, 1, 4), Tensor(),
                                          kSame, {}, DType::f32, true);
  });
  expect_contains(wide, "conv2d_max_pool_relu_forward");
  expect_contains(wide, "up to 4 channels");
  expect_contains(forward(random_tensor(Shape{8, 8, 1}, -1, 1, 5), {}, DType::f32), "(N, H, W, C)");
  expect_contains(forward(x, {.stride_h = 1, .stride_w = 1}, DType::f32), "stride 1x1");
  expect_contains(forward(x, {.pad_h = 1, .pad_w = 1}, DType::f32), "padding 1x1");
  expect_contains(forward(x, {}, DType::f16), "to f16");
  EXPECT_FALSE(kernels::conv2d_max_pool_fuses(x.to(DType::f16), {}, DType::f32));
  // A window larger than the convolution's output.
  EXPECT_THROW(kernels::conv2d_max_pool_relu_forward(
                   x, w, Tensor(), kSame,
                   {.kernel_h = 9, .kernel_w = 9, .stride_h = 9, .stride_w = 9}, DType::f32, true),
               ShapeError);

  const kernels::MaxPoolResult r =
      kernels::conv2d_max_pool_relu_forward(x, w, Tensor(), kSame, {}, DType::f32, true);
  Tensor dw = Tensor::empty(w.shape()), db = Tensor::empty(Shape{8});
  const auto backward = [&](const Tensor& dy, const Tensor& workspace, Tensor& dw_to) {
    return error_message<ShapeError>([&] {
      kernels::conv2d_max_pool_backward_weights(x, dy, workspace, kSame, {}, dw_to, &db);
    });
  };
  const std::string transposed = backward(r.y.reshape(Shape{2, 4, 8, 4}), r.workspace, dw);
  expect_contains(transposed, "conv2d_max_pool_backward_weights");
  expect_contains(transposed, "(2, 4, 4, 8)");
  expect_contains(backward(r.y, r.workspace.to(DType::f32), dw), "workspace");
  expect_contains(backward(r.y, Tensor(), dw), "workspace");
  Tensor bf16_dw = Tensor::empty(w.shape(), DType::bf16);
  expect_contains(backward(r.y, r.workspace, bf16_dw), "must be f32");
  expect_contains(backward(r.y.to(DType::bf16), r.workspace, dw), "both be f32 or both bf16");
}

}  // namespace
}  // namespace tandem
