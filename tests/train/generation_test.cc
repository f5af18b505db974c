// Sampling from a gpt: greedy and seeded sampling are reproducible, top-k 1
// is greedy, a sliding window past the context, and bad options are errors.
#include "tandem/train/generation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "tandem/autograd/variable.h"
#include "tandem/base/error.h"
#include "tandem/nn/models.h"

namespace tandem {
namespace {

std::shared_ptr<nn::Gpt> small_gpt() {
  auto m = nn::make_model("gpt", {.seed = 5, .settings = "layers=1,width=16,heads=2,context=8"});
  return std::dynamic_pointer_cast<nn::Gpt>(m);
}

TEST(Generation, GreedyAndSeededSamplingAreReproducible) {
  auto gpt = small_gpt();
  ASSERT_TRUE(gpt);
  gpt->train();
  const std::string greedy = train::generate(*gpt, "abc", {.tokens = 20, .temperature = 0});
  // Sampling mid-training (an epoch callback) leaves the model training.
  EXPECT_TRUE(gpt->is_training());
  EXPECT_EQ(greedy.size(), 20u);  // past the context of 8: a sliding window
  EXPECT_EQ(greedy, train::generate(*gpt, "abc", {.tokens = 20, .temperature = 0, .seed = 9}));
  EXPECT_EQ(greedy, train::generate(*gpt, "abc", {.tokens = 20, .top_k = 1}));
  const std::string a = train::generate(*gpt, "abc", {.tokens = 30, .seed = 1});
  EXPECT_EQ(a, train::generate(*gpt, "abc", {.tokens = 30, .seed = 1}));
  // An untrained model is near uniform over 256 bytes: another seed differs.
  EXPECT_NE(a, train::generate(*gpt, "abc", {.tokens = 30, .seed = 2}));
  EXPECT_EQ(train::generate(*gpt, "abc", {.tokens = 0}), "");
  // top_k 3 draws only among the 3 most likely bytes of each step, and
  // among all three: the first byte over many seeds.
  gpt->eval();
  const std::vector<float> logits =
      gpt->forward(Variable(Tensor::from_ints(Shape{1, 3}, std::vector<int32_t>{'a', 'b', 'c'})))
          .value()
          .to_floats();
  std::vector<int> order(256);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int x, int y) { return logits[2 * 256 + x] > logits[2 * 256 + y]; });
  const std::set<int> top3(order.begin(), order.begin() + 3);
  std::set<int> drawn;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    const std::string next = train::generate(*gpt, "abc", {.tokens = 1, .top_k = 3, .seed = seed});
    ASSERT_EQ(next.size(), 1u);
    drawn.insert(static_cast<unsigned char>(next[0]));
  }
  EXPECT_EQ(drawn, top3);
}

TEST(Generation, BadPromptsAndOptionsAreErrors) {
  auto gpt = small_gpt();
  EXPECT_THROW(train::generate(*gpt, "", {}), InvalidArgument);
  EXPECT_THROW(train::generate(*gpt, "123456789", {}), InvalidArgument);  // context 8
  EXPECT_THROW(train::generate(*gpt, "a", {.tokens = -1}), InvalidArgument);
  EXPECT_THROW(train::generate(*gpt, "a", {.temperature = -0.5}), InvalidArgument);
  EXPECT_THROW(train::generate(*gpt, "a", {.top_k = 257}), InvalidArgument);
  auto small_vocabulary = std::dynamic_pointer_cast<nn::Gpt>(
      nn::make_model("gpt", {.settings = "vocabulary=16,layers=1,width=16,heads=2,context=8"}));
  EXPECT_THROW(train::generate(*small_vocabulary, "a", {}), InvalidArgument);  // 'a' = 97
  // Ids past 255 are not bytes (they were truncated to a char).
  auto large_vocabulary = std::dynamic_pointer_cast<nn::Gpt>(
      nn::make_model("gpt", {.settings = "vocabulary=300,layers=1,width=16,heads=2,context=8"}));
  try {
    train::generate(*large_vocabulary, "a", {.tokens = 4});
    ADD_FAILURE() << "a vocabulary of 300 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary of 300 is not in [1, 256]"), std::string::npos)
        << e.what();
  }
}

// Any module of the same shape generates: the gpt through the generic
// entry gives the same text, and a model whose logits are not (1, T, V) is
// an error naming the shapes.
TEST(Generation, AnyLanguageModelGeneratesAndOthersAreRefused) {
  auto gpt = small_gpt();
  const train::LanguageModel lm{*gpt, 8, 256};
  EXPECT_EQ(train::generate(lm, "abc", {.tokens = 12, .seed = 3}),
            train::generate(*gpt, "abc", {.tokens = 12, .seed = 3}));
  const train::LanguageModel wrong{*gpt, 8, 100};
  try {
    train::generate(wrong, "abc", {.tokens = 1});
    ADD_FAILURE() << "a vocabulary of 100 was accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("(1, 3, 100) logits"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem
