// The gpt and resnet built-ins on 2 mirrored devices take the one-device
// steps: every parameter within 1e-5 relative error per tensor after several
// steps (resnet with synchronised batch norm, whose statistics then cover
// the whole global batch as on one device).
#include <gtest/gtest.h>

#include "support/gradcheck.h"
#include "support/reference.h"
#include "tandem/autograd/functions.h"
#include "tandem/distribute/strategy.h"
#include "tandem/nn/models.h"

namespace tandem {
namespace {

std::unique_ptr<distribute::Strategy> strategy(const std::string& name, int devices) {
  return distribute::make_strategy({.name = name,
                                    .devices = devices,
                                    .threads_per_device = 1,
                                    .allow_oversubscription = true});
}

void expect_same_training(const std::string& model, const std::string& settings,
                          const std::function<data::Element(int64_t)>& batch,
                          const distribute::ForwardFn& forward, double clip_norm = 0.0) {
  const auto build = [&] { return nn::make_model(model, {.seed = 4, .settings = settings}); };
  // SGD, not Adam: the key bias's gradient is zero up to rounding (softmax
  // does not change when every score of a row moves together), and Adam
  // would normalise that rounding noise into full-size, arbitrary updates.
  const distribute::EngineOptions options{
      .optimizer = {.name = "sgd", .learning_rate = 0.1, .global_clip_norm = clip_norm}};
  auto one_device = strategy("one_device", 1), mirrored = strategy("mirrored", 2);
  auto one = one_device->make_engine(build, options);
  auto two = mirrored->make_engine(build, options);
  for (int64_t step = 0; step < 4; ++step) {
    const data::Element b = batch(step);
    const distribute::StepResult ra = one->step(b, forward, {.step = step});
    const distribute::StepResult rb = two->step(b, forward, {.step = step});
    EXPECT_NEAR(ra.loss, rb.loss, 1e-5 * std::abs(ra.loss)) << model << " step " << step;
    // The norm of the all-reduced gradients, not of one replica's.
    EXPECT_NEAR(ra.gradient_norm, rb.gradient_norm, 1e-5 * ra.gradient_norm);
    if (clip_norm > 0.0) {
      EXPECT_GT(ra.gradient_norm, clip_norm) << "clipping should act";
    }
  }
  const auto pa = one->model().named_parameters(), pb = two->model(1).named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_LT(testing::relative_error(pa[i].second.value().to_floats(),
                                      pb[i].second.value().to_floats()),
              1e-5)
        << model << " " << pa[i].first;
  }
}

data::Element token_batch(int64_t step) {
  Generator g(static_cast<uint64_t>(step) + 10);
  std::vector<int32_t> x(6 * 16), y(6 * 16);
  for (auto& t : x) t = static_cast<int32_t>(g.next_below(256));
  for (auto& t : y) t = static_cast<int32_t>(g.next_below(256));
  return data::Element{{"tokens", Tensor::from_ints(Shape{6, 16}, x)},
                       {"targets", Tensor::from_ints(Shape{6, 16}, y)}};
}

Variable language_model_loss(nn::Module& m, const distribute::ReplicaBatch& b) {
  return softmax_cross_entropy_per_example(m.forward(Variable(b.rows.at("tokens"))),
                                           b.rows.at("targets"));
}

TEST(ReferenceModels, GptOnTwoMirroredDevicesMatchesOneDevice) {
  expect_same_training("gpt", "layers=2,width=32,heads=4,context=16", token_batch,
                       language_model_loss);
}

TEST(ReferenceModels, GradientClippingUsesTheGlobalNormOfTheReducedGradients) {
  expect_same_training("gpt", "layers=2,width=32,heads=4,context=16", token_batch,
                       language_model_loss, 0.05);
}

TEST(ReferenceModels, ResnetWithSynchronisedBatchNormOnTwoMirroredDevicesMatchesOneDevice) {
  const auto batch = [](int64_t step) {
    std::vector<int32_t> y(8);
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>((i + step) % 10);
    return data::Element{
        {"image", testing::random_tensor(Shape{8, 12, 12, 1}, -1, 1, 20 + step)},
        {"label", Tensor::from_ints(Shape{8}, y)}};
  };
  expect_same_training("resnet", "width=8,sync_bn=true", batch,
                       [](nn::Module& m, const distribute::ReplicaBatch& b) {
                         return softmax_cross_entropy_per_example(
                             m.forward(Variable(b.rows.at("image"))), b.rows.at("label"));
                       });
}

}  // namespace
}  // namespace tandem
