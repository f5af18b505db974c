// The gpt and resnet built-ins: shapes, parameter names and counts, settings,
// bad input, and that they learn (overfit a small batch).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "support/gradcheck.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/nn/models.h"
#include "tandem/nn/transformer.h"
#include "tandem/optim/optimizer.h"

namespace tandem {
namespace {

Tensor tokens(int64_t B, int64_t T, uint64_t seed) {
  Generator g(seed);
  std::vector<int32_t> v(static_cast<size_t>(B * T));
  for (auto& t : v) t = static_cast<int32_t>(g.next_below(256));
  return Tensor::from_ints(Shape{B, T}, v);
}

bool has_parameter(const nn::Module& m, const std::string& name) {
  for (const auto& [n, v] : m.named_parameters())
    if (n == name) return true;
  return false;
}

TEST(Gpt, ShapesNamesAndTiedEmbedding) {
  auto gpt = nn::make_model("gpt", {.seed = 1, .settings = "layers=2,width=32,heads=4,context=16"});
  const Variable logits = gpt->forward(Variable(tokens(3, 16, 1)));
  EXPECT_EQ(logits.shape(), (Shape{3, 16, 256}));
  EXPECT_EQ(logits.dtype(), DType::f32);
  // Embeddings 256*32 + 16*32, per block 2 norms (4*32), qkv 32*96+96,
  // proj 32*32+32, fc 32*128+128, proj 128*32+32; final norm 64; no output
  // matrix (tied to the token embedding).
  const int64_t block = 4 * 32 + 32 * 96 + 96 + 32 * 32 + 32 + 32 * 128 + 128 + 128 * 32 + 32;
  EXPECT_EQ(gpt->parameter_count(), 256 * 32 + 16 * 32 + 2 * block + 64);
  for (const char* name :
       {"token_embedding.weight", "position_embedding.weight", "blocks.0.norm1.weight",
        "blocks.0.attention.qkv.weight", "blocks.1.attention.proj.bias", "blocks.1.mlp.fc.weight",
        "blocks.1.mlp.proj.weight", "norm.bias"})
    EXPECT_TRUE(has_parameter(*gpt, name)) << name;
  // A shorter sequence is fine; a longer one, a bad token or rank is an error.
  EXPECT_EQ(gpt->forward(Variable(tokens(2, 5, 2))).shape(), (Shape{2, 5, 256}));
  EXPECT_THROW(gpt->forward(Variable(tokens(1, 17, 3))), ShapeError);
  EXPECT_THROW(gpt->forward(Variable(Tensor::zeros(Shape{2, 4}))), ShapeError);
  EXPECT_THROW(gpt->forward(Variable(Tensor::from_ints(Shape{1, 2}, std::vector<int32_t>{1, 256}))),
               InvalidArgument);
}

TEST(Gpt, LearnsASmallBatchByHeart) {
  auto gpt = nn::make_model("gpt", {.seed = 2, .settings = "layers=2,width=32,heads=4,context=16"});
  const Tensor x = tokens(4, 16, 5), y = tokens(4, 16, 6);
  auto opt = optim::make_optimizer({.kind = optim::OptimizerKind::adam, .learning_rate = 1e-2},
                                   gpt->parameters());
  float first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    gpt->zero_grad();
    const Variable loss = softmax_cross_entropy(reshape(gpt->forward(Variable(x)), Shape{64, 256}),
                                                y.reshape(Shape{64}));
    loss.backward();
    opt->step();
    (step == 0 ? first : last) = loss.value().item();
  }
  EXPECT_NEAR(first, std::log(256.0f), 0.2f);  // GPT-2's small initialisation: near uniform
  EXPECT_LT(last, 0.1f) << "from " << first;
}

TEST(Gpt, AttendsToEarlierPositions) {
  // The target at t is the token at t - 1: only attention to the previous
  // position can predict it, on fresh random tokens every step.
  auto gpt = nn::make_model(
      "gpt", {.seed = 3, .settings = "vocabulary=16,layers=1,width=32,heads=2,context=12"});
  auto opt = optim::make_optimizer({.kind = optim::OptimizerKind::adam, .learning_rate = 3e-3},
                                   gpt->parameters());
  Generator g(9);
  float last = 0;
  for (int step = 0; step < 300; ++step) {
    std::vector<int32_t> x(16 * 12), y(16 * 12);
    for (auto& t : x) t = static_cast<int32_t>(g.next_below(16));
    for (size_t i = 0; i < x.size(); ++i) y[i] = i % 12 == 0 ? 0 : x[i - 1];
    gpt->zero_grad();
    const Variable loss = softmax_cross_entropy(
        reshape(gpt->forward(Variable(Tensor::from_ints(Shape{16, 12}, x))), Shape{16 * 12, 16}),
        Tensor::from_ints(Shape{16 * 12}, y));
    loss.backward();
    opt->step();
    last = loss.value().item();
  }
  EXPECT_LT(last, 0.3f) << "uniform guessing gives " << std::log(16.0f);
}

TEST(Gpt, SettingsAreCheckedAndNamed) {
  const auto message = [](const std::string& settings) {
    try {
      nn::make_model("gpt", {.settings = settings});
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("layerz=2").find("no setting 'layerz'"), std::string::npos);
  EXPECT_NE(message("layerz=2").find("heads, layers"), std::string::npos);
  EXPECT_NE(message("width=30,heads=4").find("not divisible"), std::string::npos);
  EXPECT_NE(message("layers=0").find("layers must be positive"), std::string::npos);
  EXPECT_NE(message("layers=two").find("must be an integer"), std::string::npos);
  EXPECT_NE(message("layers").find("KEY=VALUE"), std::string::npos);
  EXPECT_NE(message("dropout=1").find("dropout"), std::string::npos);
  EXPECT_NE(message("layers=2,layers=3").find("twice"), std::string::npos);
  // Sizes stop at 2^31: a product past int64 wrapped the MLP's width (to 4
  // here) without a word.
  EXPECT_NE(message("width=4,heads=1,mlp_ratio=4611686018427387905")
                .find("mlp_ratio must be at most 2147483648"),
            std::string::npos);
  EXPECT_NE(message("width=65536,heads=1,mlp_ratio=65536")
                .find("mlp_ratio x width (the MLP's hidden width) must be at most 2147483648"),
            std::string::npos);
  EXPECT_THROW(nn::make_model("cnn", {.settings = "width=3"}), InvalidArgument);
  EXPECT_EQ(nn::canonical_settings("gpt", "width=64,layers=2"), "layers=2,width=64");
}

TEST(ResNet, Resnet20ShapesNamesAndSettings) {
  auto resnet = nn::make_model("resnet", {.seed = 1});
  const Variable logits = resnet->forward(Variable(Tensor::zeros(Shape{2, 28, 28, 1})));
  EXPECT_EQ(logits.shape(), (Shape{2, 10}));
  // 19 convolutions + the stem's; BN per conv; 2 projection shortcuts.
  int64_t convs = 0;
  for (const auto& [name, v] : resnet->named_parameters())
    if (v.value().rank() == 4) ++convs;
  EXPECT_EQ(convs, 21);
  for (const char* name : {"stem.0.weight", "stem.1.weight", "stages.0.0.conv1.weight",
                           "stages.1.0.shortcut.0.weight", "stages.2.2.bn2.bias", "head.weight"})
    EXPECT_TRUE(has_parameter(*resnet, name)) << name;
  EXPECT_THROW(nn::make_model("resnet", {.settings = "depth=21"}), InvalidArgument);
  EXPECT_THROW(nn::make_model("resnet", {.settings = "width=4611686018427387905"}),
               InvalidArgument);
  auto deeper = nn::make_model("resnet", {.settings = "depth=32,width=8,channels=3,classes=5"});
  EXPECT_EQ(deeper->forward(Variable(Tensor::zeros(Shape{1, 8, 8, 3}))).shape(), (Shape{1, 5}));
}

TEST(ResNet, LearnsASmallBatchByHeart) {
  auto resnet = nn::make_model("resnet", {.seed = 3, .settings = "width=8"});
  const Tensor x = testing::random_tensor(Shape{8, 12, 12, 1}, -1, 1, 7);
  const Tensor y = Tensor::from_ints(Shape{8}, std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  auto opt = optim::make_optimizer({.kind = optim::OptimizerKind::adam, .learning_rate = 1e-2},
                                   resnet->parameters());
  float last = 0;
  for (int step = 0; step < 60; ++step) {
    resnet->zero_grad();
    const Variable loss = softmax_cross_entropy(resnet->forward(Variable(x)), y);
    loss.backward();
    opt->step();
    last = loss.value().item();
  }
  EXPECT_LT(last, 0.1f);
}

}  // namespace
}  // namespace tandem
