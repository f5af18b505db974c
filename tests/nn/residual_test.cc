#include "tandem/nn/residual.h"

#include <gtest/gtest.h>

#include "support/gradcheck.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/nn/activation.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/normalization.h"

namespace tandem {
namespace {

TEST(Residual, AddsTheInputToTheLayersOutput) {
  Generator g(2);
  auto linear = std::make_shared<nn::Linear>(5, 5, nn::LinearOptions{}, g);
  nn::Residual block({linear, std::make_shared<nn::ReLU>()});
  const Tensor x = testing::random_tensor(Shape{3, 5}, -1, 1, 4);
  NoGradGuard no_grad;
  const std::vector<float> y = block.forward(Variable(x)).value().to_floats();
  const std::vector<float> f = relu(linear->forward(Variable(x))).value().to_floats();
  const std::vector<float> xs = x.to_floats();
  ASSERT_EQ(y.size(), xs.size());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(y[i], xs[i] + f[i]) << i;
}

TEST(Residual, NamesItsLayersLikeSequentialAndSummarisesThem) {
  nn::Residual block({std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::LayerNorm>(4)});
  std::vector<std::string> names;
  for (const auto& [name, p] : block.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"}));
  EXPECT_EQ(block.size(), 2u);
  EXPECT_EQ(block.describe(), "Residual(2 layers)");
  EXPECT_NE(block.summary().find("LayerNorm(4)"), std::string::npos);
}

TEST(Residual, GradientsMatchFiniteDifferences) {
  Generator g(5);
  auto linear = std::make_shared<nn::Linear>(4, 4, nn::LinearOptions{}, g);
  nn::Residual block({linear, std::make_shared<nn::GELU>()});
  const Variable x(testing::distinct_tensor(Shape{3, 4}, 0.05f, 9), /*requires_grad=*/true);
  testing::expect_gradients_match(
      [&](const std::vector<Variable>& in) { return block.forward(in[0]); },
      {x, linear->weight(), linear->bias()});
}

TEST(Residual, RejectsLayersThatChangeTheShapeAndEmptyBlocks) {
  nn::Residual block({std::make_shared<nn::Linear>(4, 3)});
  try {
    block.forward(Variable(Tensor::zeros(Shape{2, 4})));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("(2, 4) to (2, 3)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nn::Residual({}), InvalidArgument);
  EXPECT_THROW(nn::Residual({nullptr}), InvalidArgument);
}

TEST(Residual, SumsInTheLayersDtype) {
  auto linear = std::make_shared<nn::Linear>(
      4, 4, nn::LinearOptions{.compute_dtype = DType::bf16, .output_dtype = DType::bf16});
  nn::Residual block({linear});
  const Variable y = block.forward(Variable(testing::random_tensor(Shape{2, 4}, -1, 1, 3)));
  EXPECT_EQ(y.dtype(), DType::bf16);
}

}  // namespace
}  // namespace tandem
