#include <gtest/gtest.h>

#include <cmath>

#include "support/errors.h"
#include "support/gradcheck.h"
#include "tandem/autograd/functions.h"
#include "tandem/autograd/node.h"
#include "tandem/base/error.h"
#include "tandem/kernels/normalization.h"
#include "tandem/nn/activation.h"
#include "tandem/nn/conv.h"
#include "tandem/nn/dropout.h"
#include "tandem/nn/embedding.h"
#include "tandem/nn/flatten.h"
#include "tandem/nn/init.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/models.h"
#include "tandem/nn/normalization.h"
#include "tandem/nn/sequential.h"

namespace tandem {
namespace {

TEST(Models, CnnHasTheReferenceParameterCountAndOrder) {
  auto cnn = nn::make_cnn();
  EXPECT_EQ(cnn->parameter_count(), 421642);
  std::vector<std::string> names;
  for (const auto& [name, p] : cnn->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "5.weight",
                                             "5.bias", "6.weight", "6.bias"}));
  EXPECT_EQ(cnn->named_parameters()[0].second.shape(), (Shape{3, 3, 1, 32}));
  EXPECT_EQ(cnn->named_parameters()[4].second.shape(), (Shape{128, 3136}));
  const Variable out = cnn->forward(Variable(Tensor::zeros(Shape{3, 28, 28, 1})));
  EXPECT_EQ(out.shape(), (Shape{3, 10}));
}

TEST(Models, MlpShapesAndUnknownName) {
  auto mlp = nn::make_model("mlp");
  EXPECT_EQ(mlp->parameter_count(), 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);
  EXPECT_EQ(mlp->forward(Variable(Tensor::zeros(Shape{2, 28, 28, 1}))).shape(), (Shape{2, 10}));
  try {
    nn::make_model("transformer");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("transformer"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cnn"), std::string::npos);
  }
  EXPECT_THROW(nn::make_model("mlp", {.compute_dtype = DType::i32}), InvalidArgument);
}

TEST(Models, SameSeedSameWeightsDifferentSeedDifferentWeights) {
  auto a = nn::make_cnn({.seed = 3}), b = nn::make_cnn({.seed = 3}), c = nn::make_cnn({.seed = 4});
  EXPECT_EQ(a->parameters()[2].value().to_floats(), b->parameters()[2].value().to_floats());
  EXPECT_NE(a->parameters()[2].value().to_floats(), c->parameters()[2].value().to_floats());
}

TEST(Init, LinearAndConvFollowPyTorchDefaults) {
  Generator g(1);
  nn::Linear linear(400, 30, {}, g);
  const float bound = 1.0f / std::sqrt(400.0f);
  float max_abs = 0;
  for (float v : linear.weight().value().to_floats()) max_abs = std::max(max_abs, std::abs(v));
  EXPECT_LE(max_abs, bound);
  EXPECT_GT(max_abs, 0.95f * bound);  // 12,000 draws reach close to the bound
  for (float v : linear.bias().value().to_floats()) EXPECT_LE(std::abs(v), bound);
  nn::Conv2d conv(8, 4, 3, {}, g);
  const float conv_bound = 1.0f / std::sqrt(72.0f);
  for (float v : conv.weight().value().to_floats()) EXPECT_LE(std::abs(v), conv_bound);
  Tensor t = Tensor::empty(Shape{1000});
  nn::init::xavier_uniform(t, 10, 20, g);
  for (float v : t.to_floats()) EXPECT_LE(std::abs(v), std::sqrt(6.0f / 30.0f));
  EXPECT_THROW(nn::init::kaiming_uniform(t, 0, 1.0f, g), InvalidArgument);
}

TEST(Layers, BatchNormUsesBatchStatsInTrainingAndRunningStatsInEval) {
  nn::BatchNorm2d bn(3);
  const Tensor x = testing::random_tensor(Shape{4, 2, 2, 3}, 1, 3, 5);
  const Variable train_out = bn.forward(Variable(x));
  // Normalised per channel in training mode: mean ~0.
  const std::vector<float> y = train_out.value().to_floats();
  for (int c = 0; c < 3; ++c) {
    double m = 0;
    for (size_t i = c; i < y.size(); i += 3) m += y[i];
    EXPECT_NEAR(m / 16, 0.0, 1e-5);
  }
  EXPECT_GT(bn.running_mean().to_floats()[0], 0.1f);
  bn.eval();
  EXPECT_FALSE(bn.is_training());
  const std::vector<float> e = bn.forward(Variable(x)).value().to_floats();
  EXPECT_NE(e, y);
  EXPECT_EQ(bn.named_buffers().size(), 2u);
  EXPECT_THROW(bn.forward(Variable(Tensor::zeros(Shape{2, 4}))), ShapeError);
}

// forward_add_relu on a layer with its own ReLU is refused; in eval mode it
// composes batch_norm and add_relu; the fused kernel refuses a residual of
// another shape and a dtype it does not fuse, naming them.
TEST(Layers, BatchNormAddReluComposesOrRefusesWhereItCannotFuse) {
  const Variable x(testing::random_tensor(Shape{2, 3, 3, 16}, -1, 1, 6));
  nn::BatchNorm2d with_relu(16, 1e-5f, 0.1f, false, true);
  testing::expect_contains(
      testing::error_message<InvalidArgument>([&] { with_relu.forward_add_relu(x, x); }),
      "applies its own ReLU before the add");
  nn::BatchNorm2d plain(16);
  plain.eval();
  EXPECT_EQ(plain.forward_add_relu(x, x).value().to_floats(),
            add_relu(plain.forward(x), x).value().to_floats());
  Tensor mean = Tensor::zeros(Shape{16}), var = Tensor::full(Shape{16}, 1.0f);
  const Tensor gamma = Tensor::full(Shape{16}, 1.0f), beta = Tensor::zeros(Shape{16});
  if (kernels::batch_norm_fuses_add_relu(x.value())) {
    const Tensor narrow = Tensor::zeros(Shape{2, 3, 3, 8});
    testing::expect_contains(testing::error_message<ShapeError>([&] {
                               kernels::batch_norm_add_relu_train(x.value(), gamma, beta, narrow,
                                                                  mean, var, 0.1f, 1e-5f);
                             }),
                             "batch_norm_add_relu: operands differ");
  }
  const Tensor half = x.value().to(DType::f16);
  EXPECT_FALSE(kernels::batch_norm_fuses_add_relu(half));
  testing::expect_contains(testing::error_message<InvalidArgument>([&] {
                             kernels::batch_norm_add_relu_train(half, gamma, beta, half, mean, var,
                                                                0.1f, 1e-5f);
                           }),
                           "no fused kernel");
}

TEST(Layers, AModuleUsedTwiceHoldsItsParametersOnce) {
  // Listed under both names, its parameters got two optimizer updates a
  // step (and two Adam moments, two checkpoint entries).
  Generator g(1);
  auto layer = std::make_shared<nn::Linear>(4, 4, nn::LinearOptions{}, g);
  auto norm = std::make_shared<nn::BatchNorm2d>(4);
  nn::Sequential s;
  s.add(layer).add(norm).add(layer).add(norm);
  const auto named = s.named_parameters();
  ASSERT_EQ(named.size(), 4u);
  EXPECT_EQ(named[0].first, "0.weight");
  EXPECT_EQ(named[2].first, "1.weight");
  EXPECT_EQ(s.parameter_count(), 4 * 4 + 4 + 4 + 4);
  EXPECT_EQ(s.named_buffers().size(), norm->named_buffers().size());
  // Gradients from both uses meet in the one weight: the sum of what two
  // separate copies of it get.
  auto shared = std::make_shared<nn::Linear>(4, 4, nn::LinearOptions{}, g);
  nn::Sequential twice;
  twice.add(shared).add(shared);
  const Variable x(testing::random_tensor(Shape{3, 4}, -1, 1, 2), false);
  sum(twice(x)).backward();
  const auto both = shared->named_parameters();  // weight, bias
  ASSERT_EQ(both.size(), 2u);
  std::vector<Variable> first, second;
  for (const auto& [name, p] : both) {
    first.emplace_back(p.value().clone(), true);
    second.emplace_back(p.value().clone(), true);
  }
  sum(linear(linear(x, first[0], first[1]), second[0], second[1])).backward();
  for (size_t i = 0; i < 2; ++i) {
    const std::vector<float> got = both[i].second.grad().to_floats();
    const std::vector<float> a = first[i].grad().to_floats(), b = second[i].grad().to_floats();
    ASSERT_EQ(got.size(), a.size());
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_NEAR(got[k], a[k] + b[k], 1e-5f * (1.0f + std::abs(a[k] + b[k])))
          << both[i].first << "[" << k << "]";
  }
}

// Integer inputs (u8 pixels) are read as their values, as Keras casts them:
// the result was u8, clamped at 0 and truncated.
TEST(Layers, DenseAndConvReadIntegerInputsAsTheirValues) {
  Generator g(4);
  nn::Linear dense(4, 3, nn::LinearOptions{}, g);
  nn::Conv2d conv(1, 2, 3, nn::Conv2dOptions{.padding = 1}, g);
  const Tensor pixels = testing::random_tensor(Shape{2, 4, 4, 1}, 0, 255, 5).to(DType::u8);
  const Tensor values = pixels.to(DType::f32);
  const Variable convolved = conv.forward(Variable(pixels));
  EXPECT_EQ(convolved.dtype(), DType::f32);
  EXPECT_EQ(convolved.value().to_floats(), conv.forward(Variable(values)).value().to_floats());
  const Tensor rows = pixels.reshape(Shape{8, 4});
  const Variable projected = dense.forward(Variable(rows));
  EXPECT_EQ(projected.dtype(), DType::f32);
  EXPECT_EQ(projected.value().to_floats(),
            dense.forward(Variable(rows.to(DType::f32))).value().to_floats());
}

TEST(Layers, DropoutIsIdentityInEvalAndSequentialPropagatesMode) {
  nn::Sequential s;
  s.emplace<nn::Flatten>().emplace<nn::Dropout>(0.5f).emplace<nn::ReLU>();
  const Tensor x = Tensor::full(Shape{2, 50}, 1.0f);
  s.eval();
  EXPECT_EQ(s.forward(Variable(x)).value().to_floats(), x.to_floats());
  s.train();
  EXPECT_NE(s.forward(Variable(x)).value().to_floats(), x.to_floats());
  EXPECT_THROW(nn::Dropout(1.5f), InvalidArgument);
}

TEST(Layers, LayerNormEmbeddingGeluAndSummary) {
  nn::Sequential s;
  s.emplace<nn::Embedding>(10, 8).emplace<nn::LayerNorm>(8).emplace<nn::GELU>();
  const Variable out =
      s.forward(Variable(Tensor::from_ints(Shape{2, 3}, std::vector<int32_t>{1, 2, 3, 4, 5, 9})));
  EXPECT_EQ(out.shape(), (Shape{2, 3, 8}));
  sum(out).backward();
  for (const auto& [name, p] : s.named_parameters()) EXPECT_TRUE(p.has_grad()) << name;
  EXPECT_NE(s.summary().find("Embedding(10, 8)"), std::string::npos);
  EXPECT_THROW(nn::Linear(0, 3), InvalidArgument);
  EXPECT_THROW(nn::Conv2d(1, 2, 3, {.stride = 0}), InvalidArgument);
}

TEST(Layers, LinearRejectsAWrongInputWidth) {
  nn::Linear l(5, 3);
  try {
    l.forward(Variable(Tensor::zeros(Shape{2, 4})));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("(2, 4)"), std::string::npos) << e.what();
  }
}

TEST(Models, Bf16ForwardIsCloseToF32) {
  for (const char* name : {"mlp", "cnn"}) {
    auto f32 = nn::make_model(name, {.seed = 1});
    auto bf16 = nn::make_model(name, {.seed = 1, .compute_dtype = DType::bf16});
    const Tensor x = testing::random_tensor(Shape{16, 28, 28, 1}, -1, 2, 2);
    NoGradGuard no_grad;
    const auto a = f32->forward(Variable(x)).value().to_floats();
    const auto b = bf16->forward(Variable(x)).value().to_floats();
    double err = 0, norm = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      err += (a[i] - b[i]) * (a[i] - b[i]);
      norm += a[i] * a[i];
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-2) << name;
  }
}

// A Sequential runs Conv2d(relu) then MaxPool2d with the ReLU after the
// pooling: outputs and every gradient equal the layers run one by one,
// bit for bit, in f32 and bf16 (the input has ties and negative windows),
// for first layers whose convolution pools its own output (1 and 2 input
// channels) and a wider one that does not (5).
TEST(Layers, SequentialPoolsBeforeTheConvolutionsReluWithTheSameResults) {
  const std::pair<int64_t, int64_t> channels[] = {{2, 16}, {1, 32}, {5, 16}};
  // f16 activations compute in f32 (mixed_float16): the pooling then runs
  // in f32 before the narrowing. Weights on a grid of quarters keep every
  // sum exact in f16, so that ties fall alike on both paths.
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (const auto& [in_channels, out_channels] : channels) {
      SCOPED_TRACE(::testing::Message()
                   << dtype_name(dtype) << " " << in_channels << " -> " << out_channels);
      Generator g(7);
      auto conv = std::make_shared<nn::Conv2d>(
          in_channels, out_channels, 3,
          nn::Conv2dOptions{.padding = 1,
                            .activation = kernels::Activation::relu,
                            .compute_dtype = dtype == DType::f16 ? DType::f32 : dtype,
                            .output_dtype = dtype},
          g);
      if (dtype == DType::f16) {
        for (auto& p : conv->parameters()) {
          float* v = p.value().data<float>();
          for (int64_t i = 0; i < p.value().numel(); ++i) v[i] = std::round(v[i] * 16.0f) / 4.0f;
          p.mark_modified();
        }
      }
      auto pool = std::make_shared<nn::MaxPool2d>(2);
      nn::Sequential sequential;
      sequential.add(conv).add(pool);
      // Values on a coarse grid: many ties within windows.
      Tensor x = testing::random_tensor(Shape{3, 6, 6, in_channels}, -2, 2, 9);
      float* xs = x.data<float>();
      for (int64_t i = 0; i < x.numel(); ++i) xs[i] = std::round(xs[i] * 2.0f) / 2.0f;
      x = x.to(dtype);
      const Tensor dy = testing::random_tensor(Shape{3, 3, 3, out_channels}, -1, 1, 10).to(dtype);
      // A first layer's few channels: one op; more: the ReLU in the pooling.
      // (Named before the lambda: clang 14 captures no structured binding.)
      const char* fused_op = in_channels <= 4 ? "conv2d_max_pool_relu" : "max_pool2d_relu";
      auto run = [&](bool fused) {
        conv->zero_grad();
        Variable input(x, true);
        const Variable y = fused ? sequential.forward(input) : (*pool)(conv->forward(input));
        if (fused) {
          EXPECT_STREQ(y.grad_fn()->op, fused_op);
        }
        y.backward(dy);
        std::vector<std::vector<uint8_t>> out{testing::storage_bytes(y.value()),
                                              testing::storage_bytes(input.grad())};
        for (auto& p : conv->parameters()) out.push_back(testing::storage_bytes(p.grad()));
        return out;
      };
      const auto fused = run(true), layered = run(false);
      ASSERT_EQ(fused.size(), layered.size());
      for (size_t i = 0; i < fused.size(); ++i) EXPECT_EQ(fused[i], layered[i]) << "part " << i;
    }
}

}  // namespace
}  // namespace tandem
