#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "tandem/base/error.h"
#include "tandem/optim/lr_schedule.h"
#include "tandem/optim/optimizer.h"

namespace tandem {
namespace {

Variable param(std::vector<float> values) {
  return Variable(Tensor::from_floats(Shape{static_cast<int64_t>(values.size())}, values), true);
}

void set_grad(Variable& p, std::vector<float> g) {
  p.zero_grad();
  p.accumulate_grad(Tensor::from_floats(p.shape(), g));
}

// Reference SGD (PyTorch's algorithm) in double, one scalar parameter.
struct SgdReference {
  double w, buf = 0;
  bool first = true;
  void step(double g, double lr, double momentum, double dampening, double wd, bool nesterov) {
    double d = g + wd * w;
    if (momentum > 0) {
      buf = first ? d : momentum * buf + (1 - dampening) * d;
      first = false;
      d = nesterov ? d + momentum * buf : buf;
    }
    w -= lr * d;
  }
};

TEST(Sgd, MatchesReferenceWithMomentumNesterovAndDecay) {
  const double grads[] = {0.5, -1.0, 0.25, 2.0, -0.75};
  for (bool nesterov : {false, true}) {
    for (double wd : {0.0, 0.1}) {
      Variable p = param({1.5f});
      optim::Sgd sgd({p}, 0.1, {.momentum = 0.9, .weight_decay = wd, .nesterov = nesterov});
      SgdReference ref{1.5};
      for (double g : grads) {
        set_grad(p, {static_cast<float>(g)});
        sgd.step();
        ref.step(g, 0.1, 0.9, 0.0, wd, nesterov);
        EXPECT_NEAR(p.value().item(), ref.w, 1e-6) << "nesterov " << nesterov << " wd " << wd;
      }
    }
  }
}

// state_slots is what each optimizer really keeps: the memory planner counts
// it, so it must not drift from the optimizers.
TEST(Optimizers, StateSlotsAreTheStateEachOptimizerKeeps) {
  const std::vector<optim::OptimizerConfig> configs = {
      {.kind = optim::OptimizerKind::sgd, .learning_rate = 0.1, .momentum = 0.0},
      {.kind = optim::OptimizerKind::sgd, .learning_rate = 0.1, .momentum = 0.9},
      {.kind = optim::OptimizerKind::lars, .learning_rate = 1.0},
      {.kind = optim::OptimizerKind::adam, .learning_rate = 1e-3},
      {.kind = optim::OptimizerKind::adamw, .learning_rate = 1e-3},
      {.kind = optim::OptimizerKind::lamb, .learning_rate = 1e-3}};
  for (const optim::OptimizerConfig& c : configs) {
    auto optimizer = optim::make_optimizer(c, {param({1, 2}), param({3})});
    std::multiset<std::string> kept, expected;
    for (const auto& [name, tensor] : optimizer->state())
      if (name != "updates") kept.insert(name);
    for (const std::string& slot : optim::state_slots(c))
      for (const char* index : {"0.", "1."}) expected.insert(index + slot);
    EXPECT_EQ(kept, expected) << optim::optimizer_name(c.kind) << " momentum " << c.momentum;
  }
}

TEST(Sgd, SkipsParametersWithoutGradientAndValidatesOptions) {
  Variable a = param({1.0f}), b = param({2.0f});
  optim::Sgd sgd({a, b}, 0.5, {.momentum = 0.9});
  set_grad(a, {1.0f});
  b.zero_grad();
  sgd.step();
  EXPECT_FLOAT_EQ(a.value().item(), 0.5f);
  EXPECT_FLOAT_EQ(b.value().item(), 2.0f);
  EXPECT_THROW(optim::Sgd({a}, -1.0), InvalidArgument);
  EXPECT_THROW(optim::Sgd({a}, 0.1, {.nesterov = true}), InvalidArgument);
  EXPECT_THROW(optim::Sgd({Variable(Tensor::zeros(Shape{1}, DType::bf16), true)}, 0.1),
               InvalidArgument);
}

TEST(Adam, MatchesReferenceForAdamAndAdamW) {
  for (bool decoupled : {false, true}) {
    Variable p = param({0.3f, -1.2f});
    const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.05;
    optim::Adam adam({p}, lr, {.weight_decay = wd, .decoupled_weight_decay = decoupled});
    double w[2] = {0.3, -1.2}, m[2] = {0, 0}, v[2] = {0, 0};
    const double grads[4][2] = {{0.1, -0.2}, {0.3, 0.1}, {-0.5, 0.05}, {0.2, 0.2}};
    for (int t = 1; t <= 4; ++t) {
      set_grad(p, {static_cast<float>(grads[t - 1][0]), static_cast<float>(grads[t - 1][1])});
      adam.step();
      for (int i = 0; i < 2; ++i) {
        double g = grads[t - 1][i];
        if (decoupled) {
          w[i] *= 1 - lr * wd;
        } else {
          g += wd * w[i];
        }
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        const double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
        w[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      }
      const auto values = p.value().to_floats();
      EXPECT_NEAR(values[0], w[0], 1e-6);
      EXPECT_NEAR(values[1], w[1], 1e-6);
    }
    EXPECT_EQ(adam.name(), decoupled ? "adamw" : "adam");
  }
}

TEST(Optimizer, StateIsNamedAndFactoryChecksNames) {
  Variable a = param({1.0f, 2.0f}), b = param({3.0f});
  auto adam =
      optim::make_optimizer({.kind = optim::OptimizerKind::adamw, .learning_rate = 0.1}, {a, b});
  std::vector<std::string> names;
  for (const auto& [name, t] : adam->state()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"updates", "0.exp_avg", "0.exp_avg_sq", "1.exp_avg",
                                             "1.exp_avg_sq"}));
}

// make_optimizer refuses settings that cannot train, naming the field and
// the value, so that the C++ API fails where `tandem train` does.
TEST(Optimizer, FactoryRefusesSettingsOutOfRange) {
  Variable a = param({1.0f});
  const auto error_of = [&](const optim::OptimizerConfig& c) {
    try {
      optim::make_optimizer(c, {a});
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const double nan = std::nan(""), inf = INFINITY;
  EXPECT_EQ(error_of({.momentum = 1.5}), "sgd momentum must be in [0, 1), got 1.5");
  EXPECT_EQ(error_of({.momentum = 1.0}), "sgd momentum must be in [0, 1), got 1");
  EXPECT_EQ(error_of({.momentum = -0.1}), "sgd momentum must be in [0, 1), got -0.1");
  EXPECT_EQ(error_of({.momentum = nan}), "sgd momentum must be in [0, 1), got nan");
  for (double lr : {0.0, -0.01, nan, inf}) {
    EXPECT_NE(error_of({.learning_rate = lr}).find("sgd learning rate must be positive and finite"),
              std::string::npos)
        << lr;
    EXPECT_NE(error_of({.kind = optim::OptimizerKind::adam, .learning_rate = lr})
                  .find("adam learning rate must be positive and finite"),
              std::string::npos)
        << lr;
  }
  EXPECT_EQ(error_of({.weight_decay = -0.1}), "sgd weight decay must be >= 0 and finite, got -0.1");
  EXPECT_EQ(error_of({.kind = optim::OptimizerKind::adamw, .weight_decay = inf}),
            "adamw weight decay must be >= 0 and finite, got inf");
  EXPECT_EQ(error_of({.kind = optim::OptimizerKind::adam, .beta1 = 1.0}),
            "adam beta1 and beta2 must be in [0, 1), got 1 and 0.999");
  EXPECT_EQ(error_of({.kind = optim::OptimizerKind::adamw, .beta2 = -0.5}),
            "adamw beta1 and beta2 must be in [0, 1), got 0.9 and -0.5");
  EXPECT_EQ(error_of({.kind = optim::OptimizerKind::adam, .eps = 0.0}),
            "adam eps must be positive and finite, got 0");
  EXPECT_EQ(error_of({.kind = optim::OptimizerKind::adam, .eps = nan}),
            "adam eps must be positive and finite, got nan");
  // What belongs to another optimizer is not checked: adam has no momentum.
  EXPECT_EQ(error_of({.kind = optim::OptimizerKind::adam, .momentum = 1.5}), "no error");
  EXPECT_EQ(error_of({.momentum = 0.0}), "no error");
  EXPECT_EQ(error_of({.kind = optim::OptimizerKind::adamw, .weight_decay = 0.0}), "no error");
}

TEST(Optimizer, DefaultLearningRateDependsOnTheOptimizer) {
  EXPECT_EQ(optim::default_learning_rate(optim::OptimizerKind::sgd), 0.05);
  EXPECT_EQ(optim::default_learning_rate(optim::OptimizerKind::adam), 1e-3);
  EXPECT_EQ(optim::default_learning_rate(optim::OptimizerKind::adamw), 1e-3);
}

TEST(OptimizerAndScheduleNames, RoundTripAndUnknownOnesAreErrors) {
  using optim::OptimizerKind;
  for (OptimizerKind k : {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw,
                          OptimizerKind::lars, OptimizerKind::lamb})
    EXPECT_EQ(optim::parse_optimizer(optim::optimizer_name(k)), k);
  for (optim::ScheduleKind k :
       {optim::ScheduleKind::constant, optim::ScheduleKind::step, optim::ScheduleKind::cosine})
    EXPECT_EQ(optim::parse_schedule(optim::schedule_name(k)), k);
  try {
    optim::parse_optimizer("rmsprop");
    FAIL() << "parsed";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "unknown optimizer 'rmsprop' (expected sgd, adam, adamw, lars or lamb)");
  }
  try {
    optim::parse_schedule("exponential");
    FAIL() << "parsed";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(
        e.what(),
        "unknown learning-rate schedule 'exponential' (expected constant, step or cosine)");
  }
  // A value outside the enum (a corrupt cast) is refused, not read as one.
  EXPECT_THROW(optim::check_optimizer_config({.kind = static_cast<OptimizerKind>(9)}),
               InvalidArgument);
}

TEST(LrSchedule, ConstantStepCosineAndWarmup) {
  auto constant = optim::make_schedule({.kind = optim::ScheduleKind::constant, .base_lr = 0.1});
  EXPECT_DOUBLE_EQ(constant->lr(1000), 0.1);
  auto step = optim::make_schedule(
      {.kind = optim::ScheduleKind::step, .base_lr = 1.0, .step_size = 10, .gamma = 0.5});
  EXPECT_DOUBLE_EQ(step->lr(9), 1.0);
  EXPECT_DOUBLE_EQ(step->lr(10), 0.5);
  EXPECT_DOUBLE_EQ(step->lr(25), 0.25);
  auto cosine = optim::make_schedule(
      {.kind = optim::ScheduleKind::cosine, .base_lr = 1.0, .total_steps = 100, .min_lr = 0.1});
  EXPECT_DOUBLE_EQ(cosine->lr(0), 1.0);
  EXPECT_NEAR(cosine->lr(50), 0.55, 1e-12);
  EXPECT_NEAR(cosine->lr(100), 0.1, 1e-12);
  EXPECT_NEAR(cosine->lr(150), 0.1, 1e-12);
  auto warm = optim::make_schedule(
      {.kind = optim::ScheduleKind::constant, .base_lr = 0.4, .warmup_steps = 4});
  EXPECT_DOUBLE_EQ(warm->lr(0), 0.1);
  EXPECT_DOUBLE_EQ(warm->lr(3), 0.4);
  EXPECT_DOUBLE_EQ(warm->lr(10), 0.4);
  EXPECT_THROW(optim::make_schedule({.kind = optim::ScheduleKind::step, .step_size = 0}),
               InvalidArgument);
  EXPECT_THROW(optim::make_schedule({.kind = optim::ScheduleKind::constant, .base_lr = -1}),
               InvalidArgument);
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

TEST(ClipGradNorm, ScalesToTheGlobalNormAndLeavesSmallerOnesAlone) {
  Variable a(Tensor::zeros(Shape{2}), true), b(Tensor::zeros(Shape{1}), true);
  a.accumulate_grad(Tensor::from_floats(Shape{2}, std::vector<float>{3, 0}));
  b.accumulate_grad(Tensor::from_floats(Shape{1}, std::vector<float>{4}));
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm({a, b}, 10.0), 5.0);  // below: unchanged
  EXPECT_EQ(a.grad().to_floats(), (std::vector<float>{3, 0}));
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm({a, b}, 1.0), 5.0);
  EXPECT_NEAR(a.grad().to_floats()[0], 0.6f, 1e-6);
  EXPECT_NEAR(b.grad().to_floats()[0], 0.8f, 1e-6);
  EXPECT_THROW(optim::clip_grad_norm({a}, 0.0), InvalidArgument);
  EXPECT_THROW(optim::check_optimizer_config({.global_clip_norm = -1.0}), InvalidArgument);
}

}  // namespace
}  // namespace tandem
