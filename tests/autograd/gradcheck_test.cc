// Every differentiable op: backward against central finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "support/gradcheck.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"

namespace tandem {
namespace {

using testing::distinct_tensor;
using testing::expect_gradients_match;
using testing::random_tensor;

Variable leaf(Tensor t) {
  return Variable(std::move(t), true);
}

TEST(Gradcheck, Matmul) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Variable a = leaf(random_tensor(ta ? Shape{5, 3} : Shape{3, 5}, -1, 1, 1));
      Variable b = leaf(random_tensor(tb ? Shape{4, 5} : Shape{5, 4}, -1, 1, 2));
      expect_gradients_match([&](const auto& in) { return matmul(in[0], in[1], ta, tb); }, {a, b});
    }
  }
}

TEST(Gradcheck, LinearWithFusedReluAndBias) {
  Variable x = leaf(distinct_tensor(Shape{4, 6}, 0.05f, 3));
  Variable w = leaf(random_tensor(Shape{5, 6}, -1, 1, 4));
  Variable b = leaf(random_tensor(Shape{5}, -1, 1, 5));
  for (auto act :
       {kernels::Activation::none, kernels::Activation::relu, kernels::Activation::gelu}) {
    // Pre-activations near zero would straddle ReLU's kink; this seed keeps them away.
    expect_gradients_match(
        [&](const auto& in) { return linear(in[0], in[1], in[2], {.activation = act}); }, {x, w, b},
        {.eps = 1e-3, .atol = 3e-3, .rtol = 2e-2});
  }
  Variable no_bias;
  expect_gradients_match([&](const auto& in) { return linear(in[0], in[1], no_bias); }, {x, w});
}

TEST(Gradcheck, Conv2dStridesPaddingDilation) {
  const kernels::Conv2dGeometry geometries[] = {
      {},
      {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1},
      {.pad_h = 2, .pad_w = 1, .dilation_h = 2}};
  for (const auto& g : geometries) {
    Variable x = leaf(random_tensor(Shape{2, 6, 5, 3}, -1, 1, 6));
    Variable w = leaf(random_tensor(Shape{3, 3, 3, 4}, -1, 1, 7));
    Variable b = leaf(random_tensor(Shape{4}, -1, 1, 8));
    expect_gradients_match(
        [&](const auto& in) { return conv2d(in[0], in[1], in[2], {.geometry = g}); }, {x, w, b});
  }
}

TEST(Gradcheck, Conv2dWithFusedRelu) {
  Variable x = leaf(random_tensor(Shape{1, 5, 5, 2}, -1, 1, 9));
  Variable w = leaf(random_tensor(Shape{3, 3, 2, 3}, -1, 1, 10));
  Variable b = leaf(random_tensor(Shape{3}, -1, 1, 11));
  expect_gradients_match(
      [&](const auto& in) {
        return conv2d(
            in[0], in[1], in[2],
            {.geometry = {.pad_h = 1, .pad_w = 1}, .activation = kernels::Activation::relu});
      },
      {x, w, b}, {.eps = 1e-3, .atol = 3e-3, .rtol = 2e-2});
}

TEST(Gradcheck, MaxPool) {
  Variable x = leaf(distinct_tensor(Shape{2, 6, 5, 3}, 0.0f, 12));
  expect_gradients_match([](const auto& in) { return max_pool2d(in[0], {}); }, {x}, {.eps = 1e-3});
  expect_gradients_match(
      [](const auto& in) {
        return max_pool2d(
            in[0],
            {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1});
      },
      {x}, {.eps = 1e-3});
}

TEST(Gradcheck, PointwiseOps) {
  Variable x = leaf(distinct_tensor(Shape{3, 7}, 0.05f, 13));
  Variable y = leaf(random_tensor(Shape{3, 7}, -1, 1, 14));
  Variable row = leaf(random_tensor(Shape{7}, -1, 1, 15));
  Variable one = leaf(random_tensor(Shape{1}, -1, 1, 16));
  expect_gradients_match([](const auto& in) { return relu(in[0]); }, {x});
  expect_gradients_match([](const auto& in) { return gelu(in[0]); }, {x});
  expect_gradients_match([](const auto& in) { return add(in[0], in[1]); }, {x, y});
  expect_gradients_match([](const auto& in) { return add(in[0], in[1]); }, {x, row});
  expect_gradients_match([](const auto& in) { return mul(in[0], in[1]); }, {x, row});
  expect_gradients_match([](const auto& in) { return mul(in[0], in[1]); }, {x, one});
  expect_gradients_match([](const auto& in) { return scale(in[0], -1.5f); }, {x});
  expect_gradients_match([](const auto& in) { return sum(in[0]); }, {x});
  expect_gradients_match([](const auto& in) { return mean(in[0]); }, {x});
  expect_gradients_match(
      [](const auto& in) {
        return flatten(reshape(in[0], Shape{7, 3, 1}));
      },
      {x});
  expect_gradients_match([](const auto& in) { return cast(cast(in[0], DType::bf16), DType::f32); },
                         {x}, {.eps = 5e-2, .atol = 2e-2, .rtol = 5e-2});
}

// The ops a custom loss is written with: values against <cmath> in double,
// gradients against finite differences.
TEST(Gradcheck, UnaryOpsSubDivAndAxisReductions) {
  const Tensor xt = random_tensor(Shape{3, 4, 5}, -2, 2, 31);
  const Tensor pos = random_tensor(Shape{3, 4, 5}, 0.5f, 2, 32);
  const std::vector<float> xv = xt.to_floats(), pv = pos.to_floats();
  const auto expect_values = [](const Variable& got, const std::vector<double>& want,
                                const char* what) {
    const std::vector<float> g = got.value().to_floats();
    ASSERT_EQ(g.size(), want.size()) << what;
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_NEAR(g[i], want[i], 1e-6 * std::max(1.0, std::abs(want[i]))) << what << " " << i;
  };
  std::vector<double> e, l, s, t, q;
  for (size_t i = 0; i < xv.size(); ++i) {
    e.push_back(std::exp(static_cast<double>(xv[i])));
    l.push_back(std::log(static_cast<double>(pv[i])));
    s.push_back(1.0 / (1.0 + std::exp(-static_cast<double>(xv[i]))));
    t.push_back(std::tanh(static_cast<double>(xv[i])));
    q.push_back(static_cast<double>(xv[i]) / pv[i]);
  }
  const Variable x = leaf(xt), p = leaf(pos);
  expect_values(exp(x), e, "exp");
  expect_values(log(p), l, "log");
  expect_values(sigmoid(x), s, "sigmoid");
  expect_values(tanh(x), t, "tanh");
  expect_values(div(x, p), q, "div");
  // sigmoid at the extremes: no overflow, no NaN.
  expect_values(sigmoid(leaf(Tensor::from_floats(Shape{2}, std::vector<float>{-100.0f, 100.0f}))),
                {std::exp(-100.0), 1.0}, "sigmoid extremes");
  // Along an axis: (3, 4, 5) summed over axis 1 (and -1), with keepdim.
  const Variable s1 = sum(x, 1);
  ASSERT_EQ(s1.shape(), (Shape{3, 5}));
  std::vector<double> by_axis(15, 0.0);
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 4; ++b)
      for (int c = 0; c < 5; ++c) by_axis[a * 5 + c] += xv[(a * 4 + b) * 5 + c];
  expect_values(s1, by_axis, "sum axis 1");
  EXPECT_EQ(sum(x, -1, true).shape(), (Shape{3, 4, 1}));
  EXPECT_EQ(mean(x, 0).shape(), (Shape{4, 5}));
  EXPECT_THROW(sum(x, 3), ShapeError);

  expect_gradients_match([](const auto& in) { return exp(in[0]); }, {leaf(xt)});
  expect_gradients_match([](const auto& in) { return log(in[0]); }, {leaf(pos)}, {.eps = 1e-3});
  expect_gradients_match([](const auto& in) { return sigmoid(in[0]); }, {leaf(xt)});
  expect_gradients_match([](const auto& in) { return tanh(in[0]); }, {leaf(xt)});
  expect_gradients_match([](const auto& in) { return sub(in[0], in[1]); },
                         {leaf(xt), leaf(random_tensor(Shape{5}, -1, 1, 33))});
  expect_gradients_match([](const auto& in) { return div(in[0], in[1]); }, {leaf(xt), leaf(pos)},
                         {.eps = 1e-3});
  for (int axis : {0, 1, 2, -1}) {
    SCOPED_TRACE(axis);
    expect_gradients_match([axis](const auto& in) { return sum(in[0], axis); }, {leaf(xt)});
    expect_gradients_match([axis](const auto& in) { return mean(in[0], axis, true); }, {leaf(xt)});
  }
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

TEST(Gradcheck, DropoutWithAFixedMask) {
  Variable x = leaf(random_tensor(Shape{50}, -1, 1, 17));
  // The same seed every evaluation gives the same mask, so f is deterministic.
  expect_gradients_match(
      [](const auto& in) {
        Generator g(99);
        return dropout(in[0], 0.4f, true, g);
      },
      {x});
  Generator g(1);
  EXPECT_EQ(dropout(x, 0.4f, false, g).impl(), x.impl());  // identity in eval
}

TEST(Gradcheck, SoftmaxCrossEntropy) {
  Variable logits = leaf(random_tensor(Shape{6, 5}, -3, 3, 18));
  const Tensor labels = Tensor::from_ints(Shape{6}, std::vector<int32_t>{0, 4, 2, 2, 1, 3});
  expect_gradients_match([&](const auto& in) { return softmax_cross_entropy(in[0], labels); },
                         {logits});
  expect_gradients_match([&](const auto& in) { return softmax_cross_entropy(in[0], labels, 24.0); },
                         {logits});
}

TEST(Gradcheck, LayerNorm) {
  Variable x = leaf(random_tensor(Shape{4, 9}, -2, 2, 19));
  Variable g = leaf(random_tensor(Shape{9}, 0.5, 1.5, 20));
  Variable b = leaf(random_tensor(Shape{9}, -1, 1, 21));
  expect_gradients_match([](const auto& in) { return layer_norm(in[0], in[1], in[2], 1e-5f); },
                         {x, g, b});
}

TEST(Gradcheck, BatchNormTrainingAndInference) {
  Variable x = leaf(random_tensor(Shape{3, 2, 2, 4}, -2, 2, 22));
  Variable g = leaf(random_tensor(Shape{4}, 0.5, 1.5, 23));
  Variable b = leaf(random_tensor(Shape{4}, -1, 1, 24));
  Tensor mean = Tensor::zeros(Shape{4}), var = Tensor::full(Shape{4}, 1.0f);
  expect_gradients_match(
      [&](const auto& in) { return batch_norm(in[0], in[1], in[2], mean, var, true, 0.1f, 1e-5f); },
      {x, g, b});
  Tensor fixed_mean = random_tensor(Shape{4}, -1, 1, 25),
         fixed_var = random_tensor(Shape{4}, 0.5, 2, 26);
  expect_gradients_match(
      [&](const auto& in) {
        return batch_norm(in[0], in[1], in[2], fixed_mean, fixed_var, false, 0.1f, 1e-5f);
      },
      {x, g, b});
}

TEST(Gradcheck, BatchNormReluFusedAndComposed) {
  Variable x = leaf(random_tensor(Shape{3, 3, 2, 5}, -2, 2, 31));
  Variable g = leaf(random_tensor(Shape{5}, 0.5, 1.5, 32));
  Variable b = leaf(random_tensor(Shape{5}, -0.5, 0.5, 33));
  Tensor mean = Tensor::zeros(Shape{5}), var = Tensor::full(Shape{5}, 1.0f);
  // Training fuses (f32); inference composes batch_norm and relu. A small
  // perturbation keeps the differences off the ReLU's kink.
  for (const bool training : {true, false}) {
    expect_gradients_match(
        [&](const auto& in) {
          return batch_norm_relu(in[0], in[1], in[2], mean, var, training, 0.1f, 1e-5f);
        },
        {x, g, b}, {.eps = 1e-3});
  }
}

TEST(Gradcheck, Embedding) {
  Variable table = leaf(random_tensor(Shape{6, 4}, -1, 1, 27));
  const Tensor idx = Tensor::from_ints(Shape{5}, std::vector<int32_t>{1, 5, 1, 0, 3});
  expect_gradients_match([&](const auto& in) { return embedding(in[0], idx); }, {table});
}

TEST(Gradcheck, Bf16ComputeMatchesF32WithinBf16Tolerance) {
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

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

using testing::expect_gradients_match;
using testing::random_tensor;

Variable input(const Shape& shape, uint64_t seed, float low = -1, float high = 1) {
  return Variable(random_tensor(shape, low, high, seed), true);
}

// The Transformer and ResNet operators, on odd shapes.
TEST(Gradcheck, BatchedMatmulEveryTransposeAndASharedOperand) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Variable a = input(ta ? Shape{2, 3, 5, 3} : Shape{2, 3, 3, 5}, 40);
      Variable b = input(tb ? Shape{2, 3, 4, 5} : Shape{2, 3, 5, 4}, 41);
      expect_gradients_match([&](const auto& in) { return batched_matmul(in[0], in[1], ta, tb); },
                             {a, b});
      Variable shared = input(tb ? Shape{4, 5} : Shape{5, 4}, 42);
      expect_gradients_match([&](const auto& in) { return batched_matmul(in[0], in[1], ta, tb); },
                             {a, shared});
    }
  }
}

TEST(Gradcheck, SoftmaxAndLogSoftmax) {
  Variable x = input(Shape{3, 2, 7}, 43, -3, 3);
  expect_gradients_match([](const auto& in) { return softmax(in[0]); }, {x});
  expect_gradients_match([](const auto& in) { return log_softmax(in[0]); }, {x});
}

TEST(Gradcheck, PermuteTransposeSliceSplitConcat) {
  Variable x = input(Shape{2, 3, 4, 5}, 44);
  Variable y = input(Shape{2, 1, 4, 5}, 45);
  expect_gradients_match([](const auto& in) { return permute(in[0], {2, 0, 3, 1}); }, {x});
  expect_gradients_match([](const auto& in) { return permute(in[0], {0, 2, 1, 3}); }, {x});
  expect_gradients_match([](const auto& in) { return transpose(in[0], -1, 1); }, {x});
  expect_gradients_match([](const auto& in) { return slice(in[0], 2, 1, 3); }, {x});
  expect_gradients_match(
      [](const auto& in) {
        const std::vector<Variable> parts = split(in[0], 1, {1, 2});
        return concat({parts[1], in[1], parts[0]}, 1);
      },
      {x, y});
  expect_gradients_match([](const auto& in) { return concat({in[0], in[0]}, -1); }, {x});
}

TEST(Gradcheck, AverageAndGlobalAveragePooling) {
  Variable x = input(Shape{2, 5, 6, 3}, 46);
  expect_gradients_match([](const auto& in) { return avg_pool2d(in[0], {}); }, {x});
  expect_gradients_match(
      [](const auto& in) {
        return avg_pool2d(
            in[0],
            {.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 1});
      },
      {x});
  expect_gradients_match([](const auto& in) { return global_avg_pool(in[0]); }, {x});
}

TEST(Gradcheck, SiluAndTanhGeluAlsoFusedIntoLinear) {
  Variable x = input(Shape{3, 7}, 47, -3, 3);
  expect_gradients_match([](const auto& in) { return silu(in[0]); }, {x});
  expect_gradients_match([](const auto& in) { return gelu_tanh(in[0]); }, {x});
  Variable w = input(Shape{4, 7}, 48);
  Variable b = input(Shape{4}, 49);
  for (auto act : {kernels::Activation::silu, kernels::Activation::gelu_tanh}) {
    expect_gradients_match(
        [&](const auto& in) { return linear(in[0], in[1], in[2], {.activation = act}); },
        {x, w, b});
  }
  // Linear over (..., in).
  Variable x3 = input(Shape{2, 3, 7}, 50);
  expect_gradients_match([&](const auto& in) { return linear(in[0], in[1], in[2]); }, {x3, w, b});
}

TEST(Gradcheck, RmsNorm) {
  Variable x = input(Shape{4, 9}, 51, -2, 2);
  Variable g = input(Shape{9}, 52, 0.5, 1.5);
  expect_gradients_match([](const auto& in) { return rms_norm(in[0], in[1], 1e-5f); }, {x, g});
}

TEST(Gradcheck, AttentionCausalAndFullWithDropout) {
  Variable q = input(Shape{2, 3, 5, 4}, 53);
  Variable k = input(Shape{2, 3, 5, 4}, 54);
  Variable v = input(Shape{2, 3, 5, 4}, 55);
  for (bool causal : {true, false}) {
    expect_gradients_match(
        [&](const auto& in) { return attention(in[0], in[1], in[2], {.causal = causal}); },
        {q, k, v});
  }
  // Keys longer than queries, and a fixed dropout mask (the same seed each time).
  Variable k7 = input(Shape{2, 3, 7, 4}, 56);
  Variable v7 = input(Shape{2, 3, 7, 4}, 57);
  expect_gradients_match(
      [&](const auto& in) {
        Generator g(5);
        return attention(in[0], in[1], in[2], {.causal = false, .dropout = 0.3f, .training = true},
                         &g);
      },
      {q, k7, v7});
}

}  // namespace
}  // namespace tandem
