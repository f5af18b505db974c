// The backward engine: accumulation, hook timing, no-grad, graph release.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "support/gradcheck.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/trace.h"
#include "tandem/tensor/allocator.h"

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

// A whole-tensor reduction's gradient lands on its input's device, wherever
// backward is called from (it took the calling thread's current device).
TEST(Engine, ReductionGradientsLandOnTheInputsDevice) {
  const Device second = cpu_device(1);
  Variable x(Tensor::full(Shape{3}, 1.0f, DType::f32, second), true);
  sum(x).backward();
  EXPECT_EQ(x.grad().device(), second);
  x.zero_grad();
  mean(x).backward();
  EXPECT_EQ(x.grad().device(), second);
}

// With a trace on, each op's backward, each sum of two gradients and each
// accumulation into a leaf is a span of category "backward op" (the per-op
// table of bench/op_table.py); with it off, nothing is recorded.
TEST(Engine, TracedBackwardRecordsASpanPerOp) {
  trace::take();
  Variable x = param({1, 2, 3}, "x");
  sum(add(mul(x, x), x)).backward();
  size_t recorded_while_off = 0;
  for (const trace::ThreadEvents& t : trace::take()) recorded_while_off += t.events.size();
  EXPECT_EQ(recorded_while_off, 0u);
  trace::set_enabled(true);
  Variable z = param({1, 2, 3}, "z");
  sum(add(mul(z, z), z)).backward();
  trace::set_enabled(false);
  std::vector<std::string> names;
  for (const trace::ThreadEvents& t : trace::take()) {
    for (const trace::Event& e : t.events) {
      if (std::string(e.category) == "backward op") names.emplace_back(e.name);
    }
  }
  for (const char* expected : {"sum", "add", "mul", "gradient accumulation"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  }
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

// A weight's first gradient contribution is computed straight into its
// buffer (no temporary, no copy); a second use in another op adds to it.
TEST(Engine, FirstWeightGradientIsWrittenIntoTheBuffer) {
  Allocator& memory = allocator_for(cpu_device());
  Variable x(Tensor::full(Shape{4, 3}, 0.5f));
  Variable w(Tensor::full(Shape{2, 3}, 0.25f), true);
  Variable b(Tensor::zeros(Shape{2}), true);
  sum(linear(x, w, b)).backward();  // allocates the buffers
  const void* buffer = w.grad_buffer().raw_data();
  const std::vector<float> once = w.grad().to_floats();
  w.zero_grad();
  b.zero_grad();
  const int64_t before = memory.stats().current(MemoryCategory::gradients);
  memory.reset_peaks();
  sum(linear(x, w, b)).backward();
  // No (2, 3) temporary: the gradient category never rose above its level.
  EXPECT_LT(memory.stats().peak(MemoryCategory::gradients) - before, 2 * 3 * 4);
  EXPECT_EQ(w.grad_buffer().raw_data(), buffer);
  EXPECT_EQ(w.grad().to_floats(), once);
  // The same weight in two ops: the second contribution accumulates.
  w.zero_grad();
  b.zero_grad();
  sum(add(linear(x, w, b), linear(x, w, b))).backward();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(w.grad().to_floats()[i], 2 * once[i]);
  // Used twice by one op (w . w^T): each operand's gradient counts once.
  Variable v(Tensor::from_floats(Shape{2, 2}, std::vector<float>{1, 2, 3, 4}), true);
  sum(matmul(v, v, false, true)).backward();
  // d/dv sum(v v^T) = (1 1)^T (1 1) v + ... = 2 * column sums broadcast: rows (4, 6)
  EXPECT_EQ(v.grad().to_floats(), (std::vector<float>{8, 12, 8, 12}));
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
