// The gpt and resnet built-ins on 2 mirrored devices take the one-device
// steps: every parameter within 1e-5 relative error per tensor after several
// steps (resnet with synchronised batch norm, whose statistics then cover
// the whole global batch as on one device).
#include <gtest/gtest.h>

#include "support/model_batches.h"
#include "support/reference.h"
#include "tandem/autograd/functions.h"
#include "tandem/distribute/strategy.h"
#include "tandem/nn/models.h"

namespace tandem {
namespace {

std::unique_ptr<distribute::Strategy> strategy(const std::string& name, int devices) {
  return distribute::make_strategy({.kind = distribute::parse_strategy(name),
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
  const distribute::EngineOptions options{.optimizer = {.kind = optim::OptimizerKind::sgd,
                                                        .learning_rate = 0.1,
                                                        .global_clip_norm = clip_norm}};
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
    EXPECT_LT(
        testing::relative_error(pa[i].second.value().to_floats(), pb[i].second.value().to_floats()),
        1e-5)
        << model << " " << pa[i].first;
  }
}

using testing::image_classifier_loss;
using testing::language_model_loss;
using testing::token_batch;

TEST(ReferenceModels, GptOnTwoMirroredDevicesMatchesOneDevice) {
  expect_same_training(
      "gpt", "layers=2,width=32,heads=4,context=16", [](int64_t step) { return token_batch(step); },
      language_model_loss);
}

TEST(ReferenceModels, GradientClippingUsesTheGlobalNormOfTheReducedGradients) {
  expect_same_training(
      "gpt", "layers=2,width=32,heads=4,context=16", [](int64_t step) { return token_batch(step); },
      language_model_loss, 0.05);
}

TEST(ReferenceModels, ResnetWithSynchronisedBatchNormOnTwoMirroredDevicesMatchesOneDevice) {
  expect_same_training(
      "resnet", "width=8,sync_bn=true", [](int64_t step) { return testing::image_batch(step, 8); },
      image_classifier_loss);
}

}  // namespace
}  // namespace tandem
