// The backward engine: accumulation, hook timing, no-grad, graph release.
#include <gtest/gtest.h>

#include <vector>

#include "support/gradcheck.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"

namespace tandem {
namespace {

Variable param(std::vector<float> values, const char* name) {
  Variable v(Tensor::from_floats(Shape{static_cast<int64_t>(values.size())}, values), true);
  v.set_name(name);
  return v;
}

TEST(Engine, GradientOfAVariableUsedTwiceIsSummed) {
  Variable x = param({1, 2, 3}, "x");
  // y = sum(x * x + x) -> dy/dx = 2x + 1
  Variable y = sum(add(mul(x, x), x));
  y.backward();
  EXPECT_EQ(x.grad().to_floats(), (std::vector<float>{3, 5, 7}));
}

TEST(Engine, GradientsAccumulateAcrossBackwardCallsUntilZeroGrad) {
  Variable x = param({1, 2}, "x");
  sum(scale(x, 3)).backward();
  sum(scale(x, 3)).backward();
  EXPECT_EQ(x.grad().to_floats(), (std::vector<float>{6, 6}));
  x.zero_grad();
  EXPECT_FALSE(x.has_grad());
  EXPECT_FALSE(x.grad().defined());
  sum(x).backward();
  EXPECT_EQ(x.grad().to_floats(), (std::vector<float>{1, 1}));
}

TEST(Engine, HookFiresOnceWhenTheGradientIsFinal) {
  Variable a = param({1, 2}, "a");
  Variable b = param({3, 4}, "b");
  std::vector<std::string> order;
  std::vector<float> seen_a;
  a.add_grad_ready_hook([&](Variable& v) {
    order.push_back("a");
    seen_a = v.grad().to_floats();
  });
  b.add_grad_ready_hook([&](Variable& v) { order.push_back(v.name()); });
  // a feeds both the early and the late part of the graph; b only the late one.
  Variable h = mul(a, b);  // recorded first
  Variable out = sum(add(h, scale(a, 2)));
  out.backward();
  ASSERT_EQ(order.size(), 2u);
  // a's final gradient includes both contributions: b + 2.
  EXPECT_EQ(seen_a, (std::vector<float>{5, 6}));
  EXPECT_EQ(std::count(order.begin(), order.end(), "a"), 1);
  EXPECT_EQ(std::count(order.begin(), order.end(), "b"), 1);
}

TEST(Engine, HookFiresOnlyForLeavesInTheGraph) {
  Variable a = param({1}, "a");
  Variable unused_path = param({2}, "u");
  int fired = 0;
  bool had_grad = true;
  unused_path.add_grad_ready_hook([&](Variable& v) {
    ++fired;
    had_grad = v.has_grad();
  });
  // Detached, u is not part of the graph: no edge, no hook.
  sum(mul(a, unused_path.detach())).backward();
  EXPECT_EQ(fired, 0);  // never part of the graph
  sum(mul(a, unused_path)).backward();
  EXPECT_EQ(fired, 1);
  EXPECT_TRUE(had_grad);
}

TEST(Engine, NoGradModeRecordsNothing) {
  Variable x = param({1, 2}, "x");
  {
    NoGradGuard guard;
    EXPECT_FALSE(grad_enabled());
    Variable y = sum(mul(x, x));
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
    EXPECT_THROW(y.backward(), Error);
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_TRUE(sum(x).requires_grad());
}

TEST(Engine, SecondBackwardThroughFreedGraphIsAnError) {
  Variable x = param({1, 2}, "x");
  Variable y = sum(mul(x, x));
  y.backward();
  try {
    y.backward();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
  }
}

TEST(Engine, BackwardNeedsAScalarOrAMatchingGradient) {
  Variable x = param({1, 2}, "x");
  Variable y = scale(x, 2);
  EXPECT_THROW(y.backward(), ShapeError);
  EXPECT_THROW(y.backward(Tensor::full(Shape{3}, 1.0f)), ShapeError);
  y.backward(Tensor::full(Shape{2}, 1.0f));
  EXPECT_EQ(x.grad().to_floats(), (std::vector<float>{2, 2}));
}

TEST(Engine, GradBufferCanBeAViewIntoASharedBucket) {
  Variable a = param({1, 2}, "a");
  Variable b = param({3}, "b");
  Tensor bucket = Tensor::zeros(Shape{3}, DType::f32, cpu_device(), MemoryCategory::gradients);
  a.set_grad_buffer(bucket.slice(0, 2));
  b.set_grad_buffer(bucket.slice(2, 3));
  sum(add(scale(a, 2), mul(a, a))).backward();
  sum(scale(b, 5)).backward();
  EXPECT_EQ(bucket.to_floats(), (std::vector<float>{4, 6, 5}));
  EXPECT_THROW(a.set_grad_buffer(Tensor::zeros(Shape{3})), ShapeError);
}

TEST(Engine, InputsThatDoNotRequireGradGetNoGradient) {
  Variable x = param({1, 2}, "x");
  Variable c(Tensor::from_floats(Shape{2}, std::vector<float>{5, 6}), false);
  sum(mul(x, c)).backward();
  EXPECT_EQ(x.grad().to_floats(), (std::vector<float>{5, 6}));
  EXPECT_FALSE(c.has_grad());
}

}  // namespace
}  // namespace tandem
