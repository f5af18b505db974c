// LARS and LAMB against the papers' formulas computed by hand in double,
// over several steps, for a weight (adapted: trust ratio and decay) and a
// bias (excluded: neither).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tandem/base/error.h"
#include "tandem/optim/layerwise.h"
#include "tandem/optim/lr_schedule.h"

namespace tandem {
namespace {

using Values = std::vector<double>;

Variable tensor_param(const Shape& shape, const Values& values) {
  std::vector<float> f(values.begin(), values.end());
  return Variable(Tensor::from_floats(shape, f), true);
}

void set_grad(Variable& p, const Values& g) {
  std::vector<float> f(g.begin(), g.end());
  p.zero_grad();
  p.accumulate_grad(Tensor::from_floats(p.shape(), f));
}

double norm(const Values& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

void expect_values(const Variable& p, const Values& expected, const char* what, int step) {
  const std::vector<float> got = p.value().to_floats();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], expected[i], 1e-6 * std::max(1.0, std::abs(expected[i])))
        << what << " element " << i << " after step " << step;
}

// The gradients of the three steps: weight (2, 3) and bias (3).
const std::vector<Values> kWeightGrads = {{0.5, -1.0, 0.25, 2.0, -0.75, 0.1},
                                          {-0.3, 0.4, 1.5, -0.2, 0.6, -1.1},
                                          {0.9, 0.05, -0.7, 0.3, -0.45, 0.8}};
const std::vector<Values> kBiasGrads = {{0.2, -0.1, 0.3}, {-0.4, 0.5, 0.1}, {0.05, 0.2, -0.3}};
const Values kWeight = {1.0, -2.0, 0.5, 0.25, 1.5, -0.75};
const Values kBias = {0.1, -0.2, 0.3};

TEST(Lars, MatchesTheFormulaWithTrustRatioDecayAndExclusions) {
  const double lr = 2.0, m = 0.9, b = 0.01, eta = 0.001;
  Variable w = tensor_param(Shape{2, 3}, kWeight), bias = tensor_param(Shape{3}, kBias);
  optim::Lars lars({w, bias}, lr, {.momentum = m, .weight_decay = b, .trust_coefficient = eta});
  Values rw = kWeight, rb = kBias, vw(6, 0.0), vb(3, 0.0);
  for (int step = 0; step < 3; ++step) {
    set_grad(w, kWeightGrads[step]);
    set_grad(bias, kBiasGrads[step]);
    lars.step();
    const Values& g = kWeightGrads[step];
    const double local = eta * norm(rw) / (norm(g) + b * norm(rw));
    for (size_t j = 0; j < 6; ++j) {
      vw[j] = m * vw[j] + lr * local * (g[j] + b * rw[j]);
      rw[j] -= vw[j];
    }
    for (size_t j = 0; j < 3; ++j) {  // the bias: plain momentum, no decay, ratio 1
      vb[j] = m * vb[j] + lr * kBiasGrads[step][j];
      rb[j] -= vb[j];
    }
    expect_values(w, rw, "weight", step);
    expect_values(bias, rb, "bias", step);
  }
}

TEST(Lamb, MatchesTheFormulaWithTrustRatioDecayAndExclusions) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-6, decay = 0.01;
  Variable w = tensor_param(Shape{2, 3}, kWeight), bias = tensor_param(Shape{3}, kBias);
  optim::Lamb lamb({w, bias}, lr, {.beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = decay});
  Values rw = kWeight, rb = kBias, mw(6, 0.0), vw(6, 0.0), mb(3, 0.0), vb(3, 0.0);
  const auto reference = [&](Values& x, Values& m, Values& v, const Values& g, int t,
                             bool adapted) {
    Values u(x.size());
    for (size_t j = 0; j < x.size(); ++j) {
      m[j] = b1 * m[j] + (1 - b1) * g[j];
      v[j] = b2 * v[j] + (1 - b2) * g[j] * g[j];
      const double mh = m[j] / (1 - std::pow(b1, t)), vh = v[j] / (1 - std::pow(b2, t));
      u[j] = mh / (std::sqrt(vh) + eps) + (adapted ? decay * x[j] : 0.0);
    }
    const double ratio = adapted ? norm(x) / norm(u) : 1.0;
    for (size_t j = 0; j < x.size(); ++j) x[j] -= lr * ratio * u[j];
  };
  for (int step = 0; step < 3; ++step) {
    set_grad(w, kWeightGrads[step]);
    set_grad(bias, kBiasGrads[step]);
    lamb.step();
    reference(rw, mw, vw, kWeightGrads[step], step + 1, true);
    reference(rb, mb, vb, kBiasGrads[step], step + 1, false);
    expect_values(w, rw, "weight", step);
    expect_values(bias, rb, "bias", step);
  }
}

// A config without eps takes LAMB's 1e-6 (not Adam's 1e-8): with gradients
// of order 1e-6, where eps sets the step, the two optimizers agree bit for
// bit.
TEST(Lamb, AConfigWithoutEpsTakesLambsDefault) {
  using optim::OptimizerKind;
  EXPECT_EQ(optim::eps_of({.kind = OptimizerKind::lamb}), 1e-6);
  EXPECT_EQ(optim::eps_of({.kind = OptimizerKind::adam}), 1e-8);
  EXPECT_EQ(optim::eps_of({.kind = OptimizerKind::adamw}), 1e-8);
  EXPECT_EQ(optim::eps_of({.kind = OptimizerKind::lamb, .eps = 1e-3}), 1e-3);
  Variable a = tensor_param(Shape{2, 3}, kWeight), b = tensor_param(Shape{2, 3}, kWeight);
  auto from_config =
      optim::make_optimizer({.kind = OptimizerKind::lamb, .learning_rate = 0.01}, {a});
  optim::Lamb direct({b}, 0.01);
  for (int step = 0; step < 3; ++step) {
    Values g = kWeightGrads[step];
    for (double& x : g) x *= 1e-6;
    set_grad(a, g);
    set_grad(b, g);
    from_config->step();
    direct.step();
    EXPECT_EQ(a.value().to_floats(), b.value().to_floats()) << "step " << step;
  }
}

TEST(Layerwise, ZeroNormsTakeATrustRatioOfOneAndBadSettingsAreErrors) {
  // A zero weight matrix: LARS steps like momentum SGD (ratio 1), not 0.
  Variable w = tensor_param(Shape{2, 2}, {0, 0, 0, 0});
  optim::Lars lars({w}, 0.5, {.momentum = 0.0});
  set_grad(w, {1, -1, 2, 0});
  lars.step();
  expect_values(w, {-0.5, 0.5, -1.0, 0.0}, "weight", 0);
  EXPECT_THROW(optim::Lars({w}, 0.1, {.momentum = 1.0}), InvalidArgument);
  EXPECT_THROW(optim::Lars({w}, 0.1, {.trust_coefficient = 0.0}), InvalidArgument);
  EXPECT_THROW(optim::Lamb({w}, 0.1, {.eps = 0.0}), InvalidArgument);
  EXPECT_THROW(optim::Lamb({w}, 0.1, {.weight_decay = -1.0}), InvalidArgument);
  EXPECT_EQ(optim::make_optimizer({.kind = optim::OptimizerKind::lars, .learning_rate = 1.0}, {w})
                ->name(),
            "lars");
  EXPECT_EQ(optim::make_optimizer({.kind = optim::OptimizerKind::lamb, .learning_rate = 1e-3}, {w})
                ->name(),
            "lamb");
  EXPECT_EQ(optim::default_learning_rate(optim::OptimizerKind::lars), 1.0);
  EXPECT_EQ(optim::default_learning_rate(optim::OptimizerKind::lamb), 1e-3);
  EXPECT_THROW(
      optim::check_optimizer_config({.kind = optim::OptimizerKind::lars, .trust_coefficient = -1}),
      InvalidArgument);
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

TEST(LrScaling, LinearAndSquareRootRulesFromAReferenceBatch) {
  EXPECT_DOUBLE_EQ(optim::scaled_learning_rate(0.1, "linear", 1024, 256), 0.4);
  EXPECT_DOUBLE_EQ(optim::scaled_learning_rate(0.1, "linear", 64, 256), 0.025);
  EXPECT_DOUBLE_EQ(optim::scaled_learning_rate(1e-3, "sqrt", 1024, 256), 2e-3);
  EXPECT_DOUBLE_EQ(optim::scaled_learning_rate(0.1, "none", 1024, 0), 0.1);
  EXPECT_THROW(optim::scaled_learning_rate(0.1, "cubic", 1024, 256), InvalidArgument);
  EXPECT_THROW(optim::scaled_learning_rate(0.1, "linear", 1024, 0), InvalidArgument);
}

}  // namespace
}  // namespace tandem
