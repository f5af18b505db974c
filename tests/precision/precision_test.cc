// Mixed precision: policies, the loss scaler's exact schedule, skipped steps
// that leave the training state bit-identical, f16 overflow that never
// reaches the weights (on one device and across replicas), and bf16/f16
// forward passes close to float32.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "support/gradcheck.h"
#include "support/reference.h"
#include "support/test_data.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/data/fashion_mnist.h"
#include "tandem/nn/models.h"
#include "tandem/optim/optimizer.h"
#include "tandem/precision/loss_scaler.h"
#include "tandem/precision/policy.h"
#include "tandem/train/trainer.h"

namespace tandem {
namespace {

using testing::relative_error;

using precision::LossScaler;
using precision::LossScalerOptions;
using precision::Policy;

using testing::fashion;

data::LabeledImages head(const data::LabeledImages& d, int64_t n) {
  return {d.images.slice(0, n).clone(), d.labels.slice(0, n)};
}

TEST(Policy, NamesRoundTripAndUnknownNamesAreListed) {
  for (Policy p : {Policy::float32, Policy::mixed_bfloat16, Policy::mixed_float16}) {
    EXPECT_EQ(precision::parse_policy(precision::policy_name(p)), p);
  }
  try {
    precision::parse_policy("mixed_float8");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("mixed_float8"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("mixed_bfloat16"), std::string::npos);
  }
  EXPECT_EQ(precision::compute_dtype(Policy::mixed_bfloat16), DType::bf16);
  EXPECT_EQ(precision::compute_dtype(Policy::mixed_float16), DType::f16);
  EXPECT_EQ(precision::matrix_dtype(Policy::mixed_bfloat16), DType::bf16);
  const nn::ModelOptions f32 = precision::model_options(Policy::float32, {.seed = 4});
  EXPECT_EQ(f32.seed, 4u);
  EXPECT_FALSE(f32.activation_dtype.has_value());
  const nn::ModelOptions bf16 = precision::model_options(Policy::mixed_bfloat16);
  EXPECT_EQ(bf16.activation_dtype, DType::bf16);
  EXPECT_TRUE(bf16.float32_outputs);
}

TEST(Policy, ModelsAreFloat32UnlessTheyNameAPolicy) {
  EXPECT_EQ(train::builtin_model("mlp").spec.policy, Policy::float32);
  EXPECT_EQ(train::builtin_model("mlp", Policy::mixed_bfloat16).spec.policy,
            Policy::mixed_bfloat16);
}

// A parameter whose gradient is `values` (as backward would leave it).
Variable parameter_with_grad(const std::vector<float>& values) {
  const auto n = static_cast<int64_t>(values.size());
  Variable p(Tensor::zeros(Shape{n}), /*requires_grad=*/true);
  p.accumulate_grad(Tensor::from_floats(Shape{n}, values));
  return p;
}

TEST(LossScaler, FollowsTheScriptedScheduleOfScalesAndSkips) {
  LossScaler scaler({.initial_scale = 8.0, .growth_interval = 3, .min_scale = 2.0});
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Step {
    bool finite;
    double scale_after;
    int64_t skipped_after;
    int64_t good_after;
  };
  // F F F: grows at the third; N halves; F F N: the count restarts; N N: the
  // floor holds at min_scale; F F F: grows again.
  const std::vector<Step> script = {
      {true, 8, 0, 1}, {true, 8, 0, 2},  {true, 16, 0, 3}, {false, 8, 1, 0}, {true, 8, 1, 1},
      {true, 8, 1, 2}, {false, 4, 2, 0}, {false, 2, 3, 0}, {false, 2, 4, 0}, {true, 2, 4, 1},
      {true, 2, 4, 2}, {true, 4, 4, 3},  {true, 4, 4, 4},  {true, 4, 4, 5},  {true, 8, 4, 6},
  };
  int index = 0;
  for (const Step& s : script) {
    SCOPED_TRACE(::testing::Message() << "step " << index++);
    // The gradients backward would produce under the current scale.
    const double scale = scaler.scale();
    const std::vector<float> truth = {0.25f, -3.0f, 1e-6f};
    std::vector<float> scaled;
    for (float g : truth) scaled.push_back(static_cast<float>(g * scale));
    if (!s.finite) scaled[index % 3] = index % 2 ? inf : nan;
    const std::vector<Variable> params = {parameter_with_grad(scaled),
                                          parameter_with_grad({1.0f, 2.0f})};
    const bool finite = scaler.unscale_and_check(params);
    EXPECT_EQ(finite, s.finite);
    if (finite) {
      // Powers of two: unscaling is exact.
      EXPECT_EQ(params[0].grad().to_floats(), truth);
      EXPECT_EQ(params[1].grad().to_floats(),
                (std::vector<float>{1.0f / float(scale), 2.0f / float(scale)}));
    }
    scaler.update(finite);
    EXPECT_EQ(scaler.scale(), s.scale_after);
    EXPECT_EQ(scaler.skipped_steps(), s.skipped_after);
    EXPECT_EQ(scaler.steps_since_overflow(), s.good_after);
  }
}

TEST(LossScaler, TensorFlowDefaultsAndFixedScale) {
  LossScaler dynamic;
  EXPECT_EQ(dynamic.scale(), 32768.0);
  for (int i = 0; i < 1999; ++i) dynamic.update(true);
  EXPECT_EQ(dynamic.scale(), 32768.0);
  dynamic.update(true);
  EXPECT_EQ(dynamic.scale(), 65536.0);
  dynamic.update(false);
  EXPECT_EQ(dynamic.scale(), 32768.0);
  EXPECT_EQ(dynamic.skipped_steps(), 1);

  LossScaler fixed({.dynamic = false, .initial_scale = 128.0});
  for (int i = 0; i < 5000; ++i) fixed.update(i % 7 != 0);
  EXPECT_EQ(fixed.scale(), 128.0);
  EXPECT_EQ(fixed.skipped_steps(), 715);  // ceil(5000 / 7)
}

TEST(LossScaler, BadOptionsAreRejected) {
  EXPECT_THROW(LossScaler({.initial_scale = 0.0}), InvalidArgument);
  EXPECT_THROW(LossScaler({.initial_scale = -2.0}), InvalidArgument);
  EXPECT_THROW(LossScaler({.initial_scale = std::numeric_limits<double>::infinity()}),
               InvalidArgument);
  EXPECT_THROW(LossScaler({.backoff_factor = 1.0}), InvalidArgument);
  EXPECT_THROW(LossScaler({.growth_interval = 0}), InvalidArgument);
  // Past float's range (every loss scaled to infinity), and below the
  // minimum of a dynamic scale (the first overflow raised it).
  EXPECT_THROW(LossScaler({.dynamic = false, .initial_scale = 1e39}), InvalidArgument);
  EXPECT_THROW(LossScaler({.initial_scale = 0.5, .min_scale = 1.0}), InvalidArgument);
  EXPECT_NO_THROW(LossScaler({.dynamic = false, .initial_scale = 0.5}));
  // A checkpoint's state: "inf" parsed as a positive scale, and no step was
  // finite again.
  LossScaler restored;
  EXPECT_THROW(restored.restore(std::numeric_limits<double>::infinity(), 0, 0), IoError);
  EXPECT_THROW(restored.restore(1e39, 0, 0), IoError);
  EXPECT_THROW(restored.restore(1024.0, -1, 0), IoError);
  EXPECT_THROW(restored.restore(1024.0, 0, -5), IoError);
  EXPECT_EQ(restored.scale(), 32768.0);
  restored.restore(1024.0, 3, 7);
  EXPECT_EQ(restored.scale(), 1024.0);
  LossScaler scaler;
  Variable bf16(Tensor::zeros(Shape{2}, DType::bf16), true);
  bf16.accumulate_grad(Tensor::zeros(Shape{2}, DType::bf16));
  EXPECT_THROW(scaler.unscale_and_check({bf16}), InvalidArgument);
}

TEST(LossScaler, LargeGradientsAreCheckedInEveryChunk) {
  // Many elements, so that the check runs in parallel chunks; the bad value
  // sits in the last one.
  set_num_threads(2);
  std::vector<float> g(200000, 1.0f);
  g.back() = std::numeric_limits<float>::infinity();
  LossScaler scaler;
  EXPECT_FALSE(scaler.unscale_and_check({parameter_with_grad(g)}));
  g.back() = 1.0f;
  EXPECT_TRUE(scaler.unscale_and_check({parameter_with_grad(g)}));
}

TEST(CastCache, WeightsAreCastOncePerUpdate) {
  Variable w(Tensor::from_floats(Shape{3}, std::vector<float>{1.0f, 2.5f, -4.0f}), true);
  const Tensor a = w.value_as(DType::bf16);
  const Tensor b = w.value_as(DType::bf16);
  EXPECT_TRUE(a.shares_storage(b));  // cached: one cast per version
  EXPECT_TRUE(w.value_as(DType::f32).shares_storage(w.value()));
  auto optimizer =
      optim::make_optimizer({.kind = optim::OptimizerKind::sgd, .learning_rate = 1.0}, {w});
  w.accumulate_grad(Tensor::from_floats(Shape{3}, std::vector<float>{1.0f, 1.0f, 1.0f}));
  optimizer->step();  // writes the value in place and marks it modified
  const Tensor c = w.value_as(DType::bf16);
  EXPECT_FALSE(c.shares_storage(a));
  EXPECT_EQ(c.to_floats(), (std::vector<float>{0.0f, 1.5f, -5.0f}));
}

TEST(Models, MixedForwardIsCloseToFloat32) {
  set_num_threads(2);
  const Tensor x = testing::random_tensor(Shape{16, 28, 28, 1}, -1, 2, 2);
  for (const char* name : {"mlp", "cnn"}) {
    auto f32 = nn::make_model(name, precision::model_options(Policy::float32, {.seed = 1}));
    NoGradGuard no_grad;
    const auto reference = f32->forward(Variable(x)).value().to_floats();
    for (Policy p : {Policy::mixed_bfloat16, Policy::mixed_float16}) {
      auto mixed = nn::make_model(name, precision::model_options(p, {.seed = 1}));
      const Tensor logits = mixed->forward(Variable(x)).value();
      EXPECT_EQ(logits.dtype(), DType::f32) << "outputs requested in float32";
      const double tolerance = p == Policy::mixed_bfloat16 ? 1e-2 : 2e-3;
      EXPECT_LT(relative_error(reference, logits.to_floats()), tolerance)
          << name << " " << precision::policy_name(p);
    }
  }
}

// Fashion-MNIST examples with the listed ones multiplied by 1e6: f16
// activations overflow on them (65504 is f16's largest value).
data::LabeledImages with_huge_examples(int64_t n, const std::vector<int64_t>& huge) {
  data::LabeledImages d = head(fashion().train, n);
  float* pixels = d.images.data<float>();
  const int64_t per_example = d.images.numel() / n;
  for (int64_t e : huge) {
    for (int64_t i = 0; i < per_example; ++i)
      pixels[e * per_example + i] = 1e6f * (1.0f + pixels[e * per_example + i]);
  }
  return d;
}

struct Snapshot {
  std::vector<std::vector<float>> parameters;
  std::vector<std::vector<float>> state;
};

Snapshot snapshot(train::Trainer& trainer) {
  Snapshot s;
  for (const auto& [name, p] : trainer.model().named_parameters()) {
    EXPECT_EQ(p.dtype(), DType::f32) << "master weight " << name;
    s.parameters.push_back(p.value().to_floats());
  }
  for (const auto& [name, t] : trainer.optimizer().state()) s.state.push_back(t->to_floats());
  return s;
}

bool all_finite(const Snapshot& s) {
  for (const auto& p : s.parameters) {
    for (float v : p) {
      if (!std::isfinite(v)) return false;
    }
  }
  return true;
}

train::TrainConfig f16_config(int devices) {
  train::TrainConfig c{
      .epochs = 2,
      .batch_size = 16,
      .engine = {.optimizer = {.kind = optim::OptimizerKind::adam, .learning_rate = 1e-3},
                 .seed = 3},
      .schedule = optim::ScheduleKind::constant};
  // Fixed scale 1: overflow comes only from the huge examples, so the skipped
  // steps are exactly the steps that hold one.
  c.engine.loss_scale = LossScalerOptions{.dynamic = false, .initial_scale = 1.0};
  c.strategy = {.kind = devices > 1 ? distribute::StrategyKind::mirrored
                                    : distribute::StrategyKind::one_device,
                .devices = devices,
                .threads_per_device = 1,
                .allow_oversubscription = true};
  return c;
}

train::ModelFactory f16_mlp() {
  return train::builtin_model("mlp", Policy::mixed_float16, 7);
}

data::Dataset shuffled(const data::LabeledImages& d) {
  return testing::shuffled(d, 3);
}

TEST(Trainer, F16OverflowSkipsTheStepAndLeavesTheStateBitIdentical) {
  set_num_threads(1);
  train::Trainer trainer(f16_config(1), f16_mlp());
  Snapshot before = snapshot(trainer);
  int skipped = 0, applied = 0;
  train::TrainCallbacks callbacks;
  callbacks.on_step = [&](const train::StepInfo& s) {
    Snapshot after = snapshot(trainer);
    if (s.skipped) {
      ++skipped;
      // The loss may look finite (oneDNN's fused ReLU maps NaN to 0), but the
      // inf activations reach the weight gradients, where the check sees them.
      EXPECT_EQ(after.parameters, before.parameters) << "skipped step " << s.global_step;
      EXPECT_EQ(after.state, before.state) << "skipped step " << s.global_step;
    } else {
      ++applied;
      EXPECT_NE(after.parameters, before.parameters) << "step " << s.global_step;
    }
    EXPECT_TRUE(all_finite(after)) << "step " << s.global_step;
    before = std::move(after);
  };
  const train::TrainResult result =
      trainer.fit(shuffled(with_huge_examples(96, {37})), {}, callbacks);
  EXPECT_EQ(skipped, 2);  // one huge example, two epochs
  EXPECT_EQ(applied, 10);
  EXPECT_EQ(result.history.back().skipped_steps, 2);
  EXPECT_EQ(result.history.back().loss_scale, 1.0);
}

TEST(Trainer, AnOverflowOnOneReplicaSkipsTheStepOnAll) {
  set_num_threads(1);
  // Whichever replica a huge example lands on, both must skip that step.
  train::Trainer trainer(f16_config(2), f16_mlp());
  int skipped = 0;
  train::TrainCallbacks callbacks;
  callbacks.on_step = [&](const train::StepInfo& s) {
    skipped += s.skipped ? 1 : 0;
    const auto a = trainer.replica_model(0).named_parameters();
    const auto b = trainer.replica_model(1).named_parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].second.value().to_floats(), b[i].second.value().to_floats())
          << "replicas diverged in " << a[i].first << " at step " << s.global_step;
    }
  };
  trainer.fit(shuffled(with_huge_examples(96, {5, 50})), {}, callbacks);
  EXPECT_GE(skipped, 2);
  EXPECT_LE(skipped, 4);
  EXPECT_TRUE(all_finite(snapshot(trainer)));
}

TEST(Trainer, EveryStepOverflowingLeavesTheInitialWeights) {
  set_num_threads(1);
  std::vector<int64_t> all(32);
  for (int64_t i = 0; i < 32; ++i) all[i] = i;
  auto config = f16_config(1);
  config.engine.loss_scale.reset();  // dynamic, the f16 default: backs off to its floor
  train::Trainer trainer(config, f16_mlp());
  const Snapshot initial = snapshot(trainer);
  const train::TrainResult result = trainer.fit(shuffled(with_huge_examples(32, all)));
  const Snapshot final = snapshot(trainer);
  EXPECT_EQ(final.parameters, initial.parameters);
  EXPECT_EQ(final.state, initial.state);
  EXPECT_EQ(result.history.back().skipped_steps, 4);
  EXPECT_EQ(result.history.back().loss_scale, 32768.0 / 16);
}

TEST(Trainer, ResumeRestoresTheLossScalerState) {
  set_num_threads(1);
  namespace fs = std::filesystem;
  auto config = f16_config(1);
  config.epochs = 3;
  config.engine.loss_scale = LossScalerOptions{.initial_scale = 1024.0, .growth_interval = 3};
  const data::Dataset data = shuffled(with_huge_examples(96, {37}));
  struct Record {
    double scale;
    bool skipped;
    bool operator==(const Record&) const = default;
  };
  auto run = [&](train::Trainer& trainer, int64_t stop_at) {
    std::vector<Record> records;
    train::TrainCallbacks callbacks;
    callbacks.on_step = [&](const train::StepInfo& s) {
      records.push_back({s.loss_scale, s.skipped});
      if (s.global_step == stop_at) trainer.request_stop();
    };
    trainer.fit(data, {}, callbacks);
    return records;
  };
  train::Trainer uninterrupted(config, f16_mlp());
  const std::vector<Record> expected = run(uninterrupted, -1);
  ASSERT_EQ(expected.size(), 18u);

  config.output_dir = (fs::path(TANDEM_TEST_TMPDIR) / "precision_resume").string();
  fs::remove_all(config.output_dir);
  std::vector<Record> records;
  {
    train::Trainer first(config, f16_mlp());
    records = run(first, 10);  // at scale 512, one finite step since the overflow
  }
  config.resume = true;
  train::Trainer second(config, f16_mlp());
  const std::vector<Record> rest = run(second, -1);
  records.insert(records.end(), rest.begin(), rest.end());
  ASSERT_EQ(records.size(), expected.size());
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i].scale, expected[i].scale) << "step " << i + 1;
    EXPECT_EQ(records[i].skipped, expected[i].skipped) << "step " << i + 1;
  }
  EXPECT_EQ(snapshot(second).parameters, snapshot(uninterrupted).parameters);
}

TEST(Trainer, MixedBfloat16LearnsWithFloat32MasterWeights) {
  set_num_threads(2);
  train::TrainConfig c{.epochs = 1, .schedule = optim::ScheduleKind::constant};
  train::Trainer trainer(c, train::builtin_model("cnn", Policy::mixed_bfloat16, 1));
  const train::TrainResult result = trainer.fit(testing::shuffled(head(fashion().train, 6400)),
                                                data::as_dataset(head(fashion().test, 2000)));
  // 50 steps at a constant rate: seeds spread over 70-78% (chance: 10%).
  EXPECT_GT(result.history.back().validation_metric("accuracy"), 0.65);
  EXPECT_EQ(result.history.back().skipped_steps, 0);  // bf16: no loss scaling by default
  for (const auto& [name, p] : trainer.model().named_parameters()) {
    EXPECT_EQ(p.dtype(), DType::f32) << name;
    EXPECT_EQ(p.grad().dtype(), DType::f32) << name;
  }
  for (const auto& [name, t] : trainer.optimizer().state()) {
    if (t->dtype() != DType::i32) {
      EXPECT_EQ(t->dtype(), DType::f32) << name;
    }
  }
}

}  // namespace
}  // namespace tandem
