// The gradient noise scale on a least-squares problem whose gradient
// covariance is known in closed form, measured by the engine from replicas
// (local against all-reduced gradients) and from micro-batches on one
// device, and the estimator's arithmetic.
#include <gtest/gtest.h>

#include <cmath>

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/distribute/strategy.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/sequential.h"
#include "tandem/train/noise_scale.h"

namespace tandem {
namespace {

// y = w* . x + noise, x ~ N(0, I_d), noise ~ N(0, sigma^2); the loss per
// example 0.5 (w . x - y)^2, its gradient (w . x - y) x. At w = w* + e the
// mean gradient is e and the per-example covariance (|e|^2 + sigma^2) I +
// e e^T, so B_simple = (d (|e|^2 + sigma^2) + |e|^2) / |e|^2.
constexpr int64_t kD = 8;
constexpr float kSigma = 0.5f;
const std::vector<float> kTarget = {0.5f, -1.0f, 0.25f, 2.0f, -0.5f, 1.0f, 0.0f, -1.5f};

double true_noise_scale(const std::vector<float>& w) {
  double e2 = 0.0;
  for (int64_t i = 0; i < kD; ++i) e2 += std::pow(w[i] - kTarget[i], 2.0);
  return (kD * (e2 + kSigma * kSigma) + e2) / e2;
}

data::Element batch(int64_t rows, uint64_t seed) {
  Generator g(seed);
  std::vector<float> x(static_cast<size_t>(rows * kD)), noise(static_cast<size_t>(rows));
  g.normal(x.data(), rows * kD);
  g.normal(noise.data(), rows, 0.0f, kSigma);
  std::vector<float> y(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float dot = 0.0f;
    for (int64_t i = 0; i < kD; ++i) dot += kTarget[i] * x[r * kD + i];
    y[r] = dot + noise[r];
  }
  return {{"x", Tensor::from_floats(Shape{rows, kD}, x)},
          {"y", Tensor::from_floats(Shape{rows}, y)}};
}

Variable squared_error(nn::Module& m, const distribute::ReplicaBatch& b) {
  const Variable p = reshape(m.forward(Variable(b.rows.at("x"))), b.rows.at("y").shape());
  const Variable e = add(p, scale(Variable(b.rows.at("y")), -1.0f));
  return scale(mul(e, e), 0.5f);
}

// w = w* + (1, 1, ..., 1) / 2: B_simple = (8 (2 + 0.25) + 2) / 2 = 10.
std::vector<float> start() {
  std::vector<float> w = kTarget;
  for (float& v : w) v += 0.5f;
  return w;
}

std::shared_ptr<nn::Module> model_at(const std::vector<float>& w) {
  Generator g(1);
  auto m = std::make_shared<nn::Sequential>();
  m->emplace<nn::Linear>(kD, 1, nn::LinearOptions{.bias = false}, g);
  Tensor weight = m->parameters()[0].value();
  weight.copy_from(Tensor::from_floats(Shape{1, kD}, w));
  return m;
}

// Many steps at (nearly) fixed weights, every one measured.
double measured_noise_scale(distribute::Strategy& strategy, int accumulation, int64_t rows,
                            int zero_stage = 0) {
  const std::vector<float> w = start();
  // A learning rate so small that the weights (and the true noise scale) stay put.
  auto engine = strategy.make_engine(
      [&] { return model_at(w); },
      {.optimizer = {.kind = optim::OptimizerKind::sgd, .learning_rate = 1e-9, .momentum = 0.0},
       .reducer = {.zero_stage = zero_stage},
       .accumulation_steps = accumulation});
  train::NoiseScaleEstimator estimator(0.995);
  for (int64_t step = 0; step < 600; ++step) {
    const distribute::StepResult r =
        engine->step(batch(rows, 1000 + static_cast<uint64_t>(step)), squared_error,
                     {.step = step, .measure_gradient_norms = true});
    EXPECT_TRUE(r.gradient_norms.has_value()) << "step " << step;
    if (r.gradient_norms) estimator.add(*r.gradient_norms);
  }
  return estimator.noise_scale();
}

TEST(NoiseScale, MatchesTheClosedFormOnLeastSquares) {
  const double expected = true_noise_scale(start());
  ASSERT_NEAR(expected, 10.0, 1e-6);
  // Four replicas of 16 examples against their global batch of 64.
  auto mirrored = distribute::make_strategy({.kind = distribute::StrategyKind::mirrored,
                                             .devices = 4,
                                             .threads_per_device = 1,
                                             .allow_oversubscription = true});
  EXPECT_NEAR(measured_noise_scale(*mirrored, 1, 64) / expected, 1.0, 0.2);
  // Under ZeRO-2 the reduced gradient is spread over the replicas' shards.
  EXPECT_NEAR(measured_noise_scale(*mirrored, 1, 64, 2) / expected, 1.0, 0.2);
  // One device, four micro-batches: the first against the whole step.
  auto one = distribute::make_strategy(
      {.kind = distribute::StrategyKind::one_device, .threads_per_device = 1});
  EXPECT_NEAR(measured_noise_scale(*one, 4, 64) / expected, 1.0, 0.2);
}

TEST(NoiseScale, NothingToCompareOnOneDeviceWithoutAccumulation) {
  auto one = distribute::make_strategy(
      {.kind = distribute::StrategyKind::one_device, .threads_per_device = 1});
  auto engine =
      one->make_engine([] { return model_at(start()); },
                       {.optimizer = {.kind = optim::OptimizerKind::sgd, .learning_rate = 0.01}});
  const distribute::StepResult r =
      engine->step(batch(16, 1), squared_error, {.measure_gradient_norms = true});
  EXPECT_FALSE(r.gradient_norms.has_value());
  // Not asked: not measured.
  auto two = distribute::make_strategy({.kind = distribute::StrategyKind::mirrored,
                                        .devices = 2,
                                        .threads_per_device = 1,
                                        .allow_oversubscription = true});
  auto engine2 =
      two->make_engine([] { return model_at(start()); },
                       {.optimizer = {.kind = optim::OptimizerKind::sgd, .learning_rate = 0.01}});
  EXPECT_FALSE(engine2->step(batch(16, 1), squared_error).gradient_norms.has_value());
  EXPECT_TRUE(engine2->step(batch(16, 2), squared_error, {.measure_gradient_norms = true})
                  .gradient_norms.has_value());
}

TEST(NoiseScale, EstimatorUsesTheUnbiasedTwoBatchFormulas) {
  train::NoiseScaleEstimator e(0.5);
  EXPECT_TRUE(std::isnan(e.noise_scale()));
  // |G|^2 = 4, tr(S) = 40: |G_b|^2 = 4 + 40 / b.
  const auto sample = [](double small, double big) {
    return train::GradientNormSample{.small_batch = small,
                                     .big_batch = big,
                                     .small_squares = 4.0 + 40.0 / small,
                                     .big_squares = 4.0 + 40.0 / big};
  };
  EXPECT_TRUE(e.add(sample(8, 32)));
  EXPECT_NEAR(e.gradient_squares(), 4.0, 1e-12);
  EXPECT_NEAR(e.trace(), 40.0, 1e-9);
  EXPECT_NEAR(e.noise_scale(), 10.0, 1e-9);
  EXPECT_TRUE(e.add(sample(16, 64)));
  EXPECT_NEAR(e.noise_scale(), 10.0, 1e-9);
  EXPECT_EQ(e.samples(), 2);
  EXPECT_FALSE(e.add(sample(32, 32)));  // one batch size: nothing to compare
  EXPECT_FALSE(e.add({.small_batch = 8, .big_batch = 32, .small_squares = NAN}));
  // Finite figures whose estimate overflows leave the averages as they were.
  EXPECT_FALSE(e.add({.small_batch = 1, .big_batch = 1 + 1e-15, .small_squares = 1e300}));
  EXPECT_EQ(e.samples(), 2);
  EXPECT_THROW(train::NoiseScaleEstimator(1.0), InvalidArgument);
}

// A checkpoint saves the averages and a resumed run restores them.
TEST(NoiseScale, AveragesRestoreIntoAFreshEstimator) {
  train::NoiseScaleEstimator e(0.5), resumed(0.5);
  e.add({.small_batch = 8, .big_batch = 32, .small_squares = 9.0, .big_squares = 5.25});
  resumed.restore(e.averages());
  EXPECT_EQ(resumed.noise_scale(), e.noise_scale());
  EXPECT_EQ(resumed.samples(), 1);
  const train::GradientNormSample next{
      .small_batch = 8, .big_batch = 32, .small_squares = 7.0, .big_squares = 4.5};
  e.add(next);
  resumed.add(next);
  EXPECT_EQ(resumed.noise_scale(), e.noise_scale());
  EXPECT_THROW(resumed.restore({.trace = INFINITY}), InvalidArgument);
  EXPECT_THROW(resumed.restore({.samples = -1}), InvalidArgument);
}

}  // namespace
}  // namespace tandem
