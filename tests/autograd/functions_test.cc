// Autograd functions' behaviour beyond their values and gradients (which the
// op table checks, tests/kernels/op_table_test.cc): shapes along an axis,
// saturation, a loss composed from the primitive ops, mixed-precision
// compute, dropout in inference.
#include <gtest/gtest.h>

#include <cmath>

#include "support/gradcheck.h"
#include "tandem/autograd/functions.h"
#include "tandem/autograd/node.h"
#include "tandem/base/error.h"
#include "tandem/kernels/elementwise.h"
#include "tandem/kernels/layout.h"
#include "tandem/kernels/normalization.h"

namespace tandem {
namespace {

using testing::random_tensor;

Variable leaf(Tensor t) {
  return Variable(std::move(t), true);
}

TEST(Functions, SigmoidAtTheExtremesAxisShapesAndACustomLoss) {
  const Tensor xt = random_tensor(Shape{3, 4, 5}, -2, 2, 31);
  const Variable x = leaf(xt);
  // sigmoid at the extremes: no overflow, no NaN.
  const std::vector<float> saturated =
      sigmoid(leaf(Tensor::from_floats(Shape{2}, std::vector<float>{-100.0f, 100.0f})))
          .value()
          .to_floats();
  EXPECT_GE(saturated[0], 0.0f);
  EXPECT_LT(saturated[0], 1e-40f);  // e^-100, a subnormal float
  EXPECT_EQ(saturated[1], 1.0f);
  ASSERT_EQ(sum(x, 1).shape(), (Shape{3, 5}));
  EXPECT_EQ(sum(x, -1, true).shape(), (Shape{3, 4, 1}));
  EXPECT_EQ(mean(x, 0).shape(), (Shape{4, 5}));
  EXPECT_THROW(sum(x, 3), ShapeError);

  // A custom loss from them: binary cross-entropy by hand equals the
  // built-in one's per-example values.
  const Tensor logits = random_tensor(Shape{6, 1}, -3, 3, 34);
  const Tensor targets = Tensor::from_floats(Shape{6, 1}, std::vector<float>{0, 1, 1, 0, 1, 0});
  const Variable z = leaf(logits), yv = leaf(targets);
  const Variable one = leaf(Tensor::full(Shape{1}, 1.0f));
  const Variable pz = sigmoid(z);
  const Variable by_hand =
      scale(add(mul(yv, log(pz)), mul(sub(scale(yv, -1.0f), scale(one, -1.0f)),
                                      log(sub(scale(pz, -1.0f), scale(one, -1.0f))))),
            -1.0f);
  const std::vector<float> built_in =
      binary_cross_entropy_with_logits_per_example(leaf(logits), targets).value().to_floats();
  const std::vector<float> mine = sum(by_hand, 1).value().to_floats();
  ASSERT_EQ(mine.size(), built_in.size());
  for (size_t i = 0; i < mine.size(); ++i) EXPECT_NEAR(mine[i], built_in[i], 1e-5) << i;
}

// An order that is not a permutation is refused before anything is
// written: the backward's inverse was built first, out of bounds (heap
// corruption seen from Python's Tensor.permute).
TEST(Functions, PermuteRefusesAnOrderThatIsNotAPermutation) {
  const Variable x = leaf(random_tensor(Shape{2, 3}, -1, 1, 5));
  for (const std::vector<int>& order :
       std::vector<std::vector<int>>{{1, 7}, {1, -40}, {0, 0}, {0, 0, 5}, {1}}) {
    EXPECT_THROW(permute(x, order), ShapeError);
    EXPECT_THROW(kernels::inverse_permutation(order), ShapeError);
  }
  EXPECT_EQ(kernels::inverse_permutation(std::vector<int>{2, 0, 1}), (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(permute(x, {1, 0}).value().shape(), (Shape{3, 2}));
}

TEST(Functions, DropoutIsTheIdentityInInference) {
  const Variable x = leaf(random_tensor(Shape{50}, -1, 1, 17));
  Generator g(1);
  EXPECT_EQ(dropout(x, 0.4f, false, g).impl(), x.impl());
  EXPECT_EQ(dropout(x, 0.0f, true, g).impl(), x.impl());
}

TEST(Functions, Bf16ComputeMatchesF32WithinBf16Tolerance) {
  Variable x = leaf(random_tensor(Shape{8, 16}, -1, 1, 28));
  Variable w = leaf(random_tensor(Shape{4, 16}, -1, 1, 29));
  Variable b = leaf(random_tensor(Shape{4}, -1, 1, 30));
  const Variable f32 = linear(x, w, b);
  const Variable bf16 = linear(x, w, b, {.compute_dtype = DType::bf16});
  EXPECT_EQ(bf16.dtype(), DType::f32);
  const auto a = f32.value().to_floats(), c = bf16.value().to_floats();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], c[i], 0.05 + 0.02 * std::abs(a[i]));
  sum(bf16).backward();
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_EQ(x.grad().dtype(), DType::f32);
}

// conv2d_max_pool_relu against max_pool2d_relu(conv2d(...)), bit for bit,
// value and every gradient (x's through the pooling's backward and the
// convolution's backward data): fused (a first layer's channels, windows
// that tile) in f32 and in bf16 compute with bf16 or f32 output, and the
// composition it falls back to (5 channels, overlapping windows). The
// convolution's own ReLU, which the op moves after the pooling, gives the
// same; a GELU is refused.
TEST(Functions, Conv2dMaxPoolReluGivesTheComposedOpsBits) {
  struct Case {
    Shape x, w;
    kernels::Pool2dGeometry pool;
    DType compute;
    std::optional<DType> output;
    bool fuses;  // one op, or the composition (5 channels, overlapping windows)
  };
  const kernels::Pool2dGeometry overlapping{.stride_h = 1, .stride_w = 1};
  const Case cases[] = {
      {Shape{2, 8, 8, 1}, Shape{3, 3, 1, 32}, {}, DType::f32, {}, true},
      {Shape{2, 8, 6, 3}, Shape{3, 3, 3, 20}, {}, DType::bf16, DType::bf16, true},
      {Shape{2, 7, 7, 2}, Shape{3, 3, 2, 32}, {}, DType::bf16, DType::f32, true},
      {Shape{2, 6, 6, 5}, Shape{3, 3, 5, 16}, {}, DType::f32, {}, false},
      {Shape{2, 6, 6, 1}, Shape{3, 3, 1, 16}, overlapping, DType::bf16, {}, false}};
  uint64_t seed = 90;
  for (const Case& c : cases) {
    for (const kernels::Activation activation :
         {kernels::Activation::none, kernels::Activation::relu}) {
      SCOPED_TRACE(::testing::Message()
                   << c.x.to_string() << " * " << c.w.to_string() << " " << dtype_name(c.compute));
      const Tensor x = random_tensor(c.x, -1, 1, ++seed), w = random_tensor(c.w, -1, 1, ++seed);
      const Tensor b = random_tensor(Shape{c.w[3]}, -0.5, 0.5, ++seed);
      const Conv2dOptions options{.geometry = {.pad_h = 1, .pad_w = 1},
                                  .activation = activation,
                                  .compute_dtype = c.compute,
                                  .output_dtype = c.output};
      Conv2dOptions plain = options;
      plain.activation = kernels::Activation::none;
      std::vector<std::vector<uint8_t>> bytes[2];
      for (const bool fused : {false, true}) {
        Variable xv = leaf(x.clone()), wv = leaf(w.clone()), bv = leaf(b.clone());
        const Variable y = fused ? conv2d_max_pool_relu(xv, wv, bv, options, c.pool)
                                 : max_pool2d_relu(conv2d(xv, wv, bv, plain), c.pool);
        if (fused) {
          EXPECT_STREQ(y.grad_fn()->op, c.fuses ? "conv2d_max_pool_relu" : "max_pool2d_relu");
        }
        const Tensor dy = random_tensor(y.shape(), -1, 1, seed).to(y.dtype());
        sum(mul(y, Variable(dy, false))).backward();
        for (const Tensor& t : {y.value(), xv.grad(), wv.grad(), bv.grad()}) {
          bytes[fused].push_back(testing::storage_bytes(t));
        }
      }
      EXPECT_EQ(bytes[0][0], bytes[1][0]) << "y";
      EXPECT_EQ(bytes[0][1], bytes[1][1]) << "dx";
      EXPECT_EQ(bytes[0][2], bytes[1][2]) << "dw";
      EXPECT_EQ(bytes[0][3], bytes[1][3]) << "db";
    }
  }
  const Variable x = leaf(random_tensor(Shape{1, 4, 4, 1}, -1, 1, 1));
  const Variable w = leaf(random_tensor(Shape{3, 3, 1, 8}, -1, 1, 2));
  EXPECT_THROW(
      conv2d_max_pool_relu(x, w, Variable(), {.activation = kernels::Activation::gelu}, {}),
      InvalidArgument);
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// The fused residual end of a block gives add_relu(batch_norm(...))'s bits,
// value and every gradient, in f32 and bf16, where sums land on the ReLU's
// kink (a residual that cancels the normalised value exactly) and away.
TEST(Functions, BatchNormAddReluGivesTheComposedOpsBits) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Shape shape{4, 6, 5, 32};
    const Tensor x = random_tensor(shape, -2, 2, 61).to(dtype);
    ASSERT_TRUE(kernels::batch_norm_fuses_add_relu(x) || !kernels::batch_norm_fuses_relu(x));
    const Tensor gamma = random_tensor(Shape{32}, 0.5, 1.5, 62),
                 beta = random_tensor(Shape{32}, -0.5, 0.5, 63);
    Tensor residual = random_tensor(shape, -1, 1, 64).to(dtype);
    {
      // Ties: the residual the negative of the unfused batch norm's output.
      Tensor m = Tensor::zeros(Shape{32}), v = Tensor::full(Shape{32}, 1.0f);
      const Tensor y = kernels::batch_norm_train(x, gamma, beta, m, v, 0.1f, 1e-5f).y;
      const Tensor negated = kernels::scale(y, -1.0f);
      std::vector<float> r = residual.to_floats();
      const std::vector<float> n = negated.to_floats();
      for (size_t i = 0; i < r.size(); i += 3) r[i] = n[i];
      residual = Tensor::from_floats(shape, r).to(dtype);
    }
    const Tensor dy = random_tensor(shape, -1, 1, 65).to(dtype);
    std::vector<std::vector<float>> results[2];
    for (const bool fused : {false, true}) {
      Variable xv = leaf(x.clone()), gv = leaf(gamma.clone()), bv = leaf(beta.clone()),
               rv = leaf(residual.clone());
      Tensor mean = Tensor::zeros(Shape{32}), var = Tensor::full(Shape{32}, 1.0f);
      const Variable y = fused ? batch_norm_add_relu(xv, gv, bv, rv, mean, var, true, 0.1f, 1e-5f)
                               : add_relu(batch_norm(xv, gv, bv, mean, var, true, 0.1f, 1e-5f), rv);
      sum(mul(y, Variable(dy, false))).backward();
      results[fused] = {y.value().to_floats(), xv.grad().to_floats(), gv.grad().to_floats(),
                        bv.grad().to_floats(), rv.grad().to_floats(), mean.to_floats(),
                        var.to_floats()};
    }
    const char* names[] = {"y",         "dx",           "dgamma",     "dbeta",
                           "dresidual", "running mean", "running var"};
    for (size_t i = 0; i < results[0].size(); ++i)
      EXPECT_EQ(results[0][i], results[1][i]) << names[i];
  }
}

// max_pool2d_relu against relu(max_pool2d()), bit for bit, value and
// gradient: 2x2 windows tiling the image (16 channels: the AVX-512 loop;
// 5: the general one), windows that overlap with padding and an odd size
// (the scattering backward), f32, bf16 and f16, with windows all negative,
// zeros, and a NaN (relu gives +0 and no gradient).
TEST(Functions, MaxPoolReluGivesTheComposedOpsBits) {
  struct Case {
    Shape shape;
    kernels::Pool2dGeometry geometry;
  };
  const Case cases[] = {
      {Shape{3, 8, 6, 16}, {}},
      {Shape{2, 6, 6, 5}, {}},
      {Shape{2, 7, 5, 16}, {}},
      {Shape{2, 7, 7, 3},
       {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}}};
  uint64_t seed = 70;
  for (const Case& c : cases) {
    for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(::testing::Message() << c.shape.to_string() << " " << dtype_name(dtype));
      std::vector<float> v = random_tensor(c.shape, -1, 0.5, ++seed).to_floats();
      v[0] = NAN;
      v[1] = 0.0f;
      v[v.size() / 2] = -0.0f;
      const Tensor x = Tensor::from_floats(c.shape, v).to(dtype);
      const Shape y_shape = kernels::pool2d_output_shape(c.shape, c.geometry);
      const Tensor dy = random_tensor(y_shape, -1, 1, ++seed).to(dtype);
      std::vector<std::vector<uint8_t>> bytes[2];
      for (const bool fused : {false, true}) {
        Variable xv = leaf(x.clone());
        const Variable y =
            fused ? max_pool2d_relu(xv, c.geometry) : relu(max_pool2d(xv, c.geometry));
        sum(mul(y, Variable(dy, false))).backward();
        for (const Tensor& t : {y.value(), xv.grad()}) {
          bytes[fused].push_back(testing::storage_bytes(t));
        }
      }
      EXPECT_EQ(bytes[0][0], bytes[1][0]) << "y";
      EXPECT_EQ(bytes[0][1], bytes[1][1]) << "dx";
    }
  }
}

}  // namespace
}  // namespace tandem
