// Activation recomputation (checkpoint()): recomputed blocks give the same
// gradients, bit for bit in f32, the same dropout masks and the same batch
// norm statistics as stored activations, under a reducer too, and the
// activation peak of the gpt falls.
#include <gtest/gtest.h>

#include <string>

#include "support/model_batches.h"
#include "tandem/autograd/checkpoint.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/distribute/strategy.h"
#include "tandem/nn/activation.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/models.h"
#include "tandem/nn/residual.h"
#include "tandem/nn/sequential.h"
#include "tandem/tensor/allocator.h"

namespace tandem {
namespace {

struct Workload {
  std::string model, settings;
  std::function<data::Element(int64_t)> batch;
  distribute::ForwardFn loss;
};

Workload gpt_with_dropout() {
  return {"gpt", "layers=3,width=32,heads=4,context=16,dropout=0.2",
          [](int64_t step) { return testing::token_batch(step, 4); }, testing::language_model_loss};
}

Workload resnet_with_batch_norm() {
  return {"resnet", "depth=8,width=4", [](int64_t step) { return testing::image_batch(step, 6); },
          testing::image_classifier_loss};
}

// One forward and backward in training mode from a fixed generator state;
// every parameter's gradient and every buffer afterwards.
struct Result {
  std::vector<std::vector<float>> gradients, buffers;
  double loss = 0.0;
};

Result train_step(const Workload& w, bool recompute) {
  auto model = nn::make_model(w.model, {.seed = 6, .settings = w.settings});
  if (recompute) {
    EXPECT_GT(model->recompute_blocks(), 0);
  }
  model->train();
  const data::Element batch = w.batch(0);
  thread_generator().set_state(1234, 0);
  auto strategy = distribute::make_strategy(
      {.kind = distribute::StrategyKind::one_device, .threads_per_device = 1});
  Result out;
  strategy->run([&](int) {
    thread_generator().set_state(1234, 0);
    const Variable per_example = w.loss(
        *model, {batch, batch.features().front().second.dim(0), strategy->replica_context(0)});
    const Variable loss = mean(per_example);
    out.loss = loss.value().item();
    loss.backward();
  });
  for (const Variable& p : model->parameters()) {
    EXPECT_TRUE(p.has_grad()) << p.name();
    out.gradients.push_back(p.has_grad() ? p.grad().to_floats() : std::vector<float>{});
  }
  for (const auto& [name, t] : model->named_buffers()) out.buffers.push_back(t->to_floats());
  return out;
}

TEST(Recompute, GradientsDropoutAndBatchNormStatisticsAreThoseOfStoredActivations) {
  for (const Workload& w : {gpt_with_dropout(), resnet_with_batch_norm()}) {
    SCOPED_TRACE(w.model);
    const Result stored = train_step(w, false);
    const Result recomputed = train_step(w, true);
    EXPECT_EQ(stored.loss, recomputed.loss);
    ASSERT_EQ(stored.gradients.size(), recomputed.gradients.size());
    for (size_t i = 0; i < stored.gradients.size(); ++i)
      EXPECT_EQ(stored.gradients[i], recomputed.gradients[i]) << "parameter " << i;
    // Running statistics were updated once, by the first pass.
    EXPECT_EQ(stored.buffers, recomputed.buffers);
  }
}

TEST(Recompute, ReplicasWithReducersAndZeroTakeTheSameSteps) {
  const Workload w = gpt_with_dropout();
  const auto build = [&](bool recompute) {
    return [=]() {
      auto m = nn::make_model(w.model, {.seed = 6, .settings = w.settings});
      if (recompute) m->recompute_blocks();
      return m;
    };
  };
  auto a_strategy = distribute::make_strategy({.kind = distribute::StrategyKind::mirrored,
                                               .devices = 2,
                                               .threads_per_device = 1,
                                               .allow_oversubscription = true});
  auto b_strategy = distribute::make_strategy({.kind = distribute::StrategyKind::mirrored,
                                               .devices = 2,
                                               .threads_per_device = 1,
                                               .allow_oversubscription = true});
  const optim::OptimizerConfig adam{.kind = optim::OptimizerKind::adamw, .learning_rate = 0.01};
  // Small buckets: the hooks of recomputed blocks launch their buckets.
  auto a = a_strategy->make_engine(
      build(false),
      {.optimizer = adam, .reducer = {.bucket_bytes = 4096, .first_bucket_bytes = 1024}});
  auto b = b_strategy->make_engine(
      build(true),
      {.optimizer = adam,
       .reducer = {.bucket_bytes = 4096, .first_bucket_bytes = 1024, .zero_stage = 2}});
  for (int64_t step = 0; step < 3; ++step) {
    const data::Element batch = w.batch(step);
    EXPECT_EQ(a->step(batch, w.loss, {.step = step}).loss,
              b->step(batch, w.loss, {.step = step}).loss)
        << "step " << step;
  }
  const auto pa = a->model(1).named_parameters(), pb = b->model(1).named_parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.value().to_floats(), pb[i].second.value().to_floats()) << pa[i].first;
}

TEST(Recompute, TheGptActivationPeakFallsByMoreThanTwoFifths) {
  // Measured on its own device so that nothing else counts.
  const Device device = cpu_device(7);
  const auto peak = [&](bool recompute) {
    DeviceScope scope(device);
    auto model =
        nn::make_model("gpt", {.seed = 1, .settings = "layers=6,width=64,heads=4,context=64"});
    if (recompute) model->recompute_blocks();
    const data::Element batch = [] {
      Generator g(3);
      std::vector<int32_t> x(8 * 64), y(8 * 64);
      for (auto& t : x) t = static_cast<int32_t>(g.next_below(256));
      for (auto& t : y) t = static_cast<int32_t>(g.next_below(256));
      return data::Element{{"tokens", Tensor::from_ints(Shape{8, 64}, x)},
                           {"targets", Tensor::from_ints(Shape{8, 64}, y)}};
    }();
    Allocator& allocator = allocator_for(device);
    allocator.reset_peaks();
    const int64_t before = allocator.stats().current(MemoryCategory::activations);
    {
      const Variable logits = model->forward(Variable(batch.at("tokens")));
      mean(softmax_cross_entropy_per_example(logits, batch.at("targets"))).backward();
    }
    return allocator.stats().peak(MemoryCategory::activations) - before;
  };
  const int64_t stored = peak(false), recomputed = peak(true);
  EXPECT_LT(static_cast<double>(recomputed), 0.6 * static_cast<double>(stored))
      << "stored " << stored << " bytes, recomputed " << recomputed;
}

TEST(Recompute, OnlyBlocksRecomputeAndParametersOfABlockOnRawInputsStillLearn) {
  Generator g(2);
  nn::Linear plain(3, 2, nn::LinearOptions{}, g);
  EXPECT_THROW(plain.set_recompute(true), InvalidArgument);
  EXPECT_EQ(nn::make_model("mlp")->recompute_blocks(), 0);
  // A residual block straight on the input (which needs no gradient).
  std::vector<std::shared_ptr<nn::Module>> layers{
      std::make_shared<nn::Linear>(3, 3, nn::LinearOptions{}, g), std::make_shared<nn::SiLU>()};
  auto block = std::make_shared<nn::Residual>(layers, std::vector<std::shared_ptr<nn::Module>>{},
                                              kernels::Activation::none);
  block->set_recompute(true);
  const Tensor x = Tensor::full(Shape{4, 3}, 0.5f);
  sum((*block)(Variable(x))).backward();
  std::vector<std::vector<float>> recomputed;
  for (const Variable& p : block->parameters()) {
    ASSERT_TRUE(p.has_grad()) << p.name();
    recomputed.push_back(p.grad().to_floats());
  }
  // ... the gradients the stored activations give.
  block->zero_grad();
  block->set_recompute(false);
  sum((*block)(Variable(x))).backward();
  for (size_t i = 0; i < recomputed.size(); ++i)
    EXPECT_EQ(block->parameters()[i].grad().to_floats(), recomputed[i]) << i;
  block->set_recompute(true);
  // Without grad mode it is a plain forward.
  NoGradGuard no_grad;
  EXPECT_FALSE((*block)(Variable(x)).requires_grad());
}

}  // namespace
}  // namespace tandem
