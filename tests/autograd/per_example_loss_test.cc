// Per-example losses as differentiable ops, table-driven: forward against the
// double references (support/loss_reference.h), backward against central
// finite differences (f32), bf16 logits/predictions against f32 within
// abs + |ref| * eps(bf16); N = 0, and errors reaching the caller.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "support/gradcheck.h"
#include "support/loss_reference.h"
#include "support/reference.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/random.h"

namespace tandem {
namespace {

using kernels::ElementwiseLoss;
using testing::expect_close;
using testing::expect_gradients_match;
using testing::random_tensor;
using testing::to_doubles;

const double kBf16Eps = testing::dtype_rtol(DType::bf16);

// Labels for logits (N, ..., K): uniform classes; with an ignore index, every
// third position, and all of example 0 when ignore_first.
Tensor labels_for(const Shape& logits, std::optional<int32_t> ignore_index, bool ignore_first,
                  uint64_t seed) {
  std::vector<int64_t> dims = logits.to_vector();
  const int64_t K = dims.back();
  dims.pop_back();
  const Shape shape(dims);
  const int64_t P = shape[0] > 0 ? shape.numel() / shape[0] : 0;
  std::vector<int32_t> labels(static_cast<size_t>(shape.numel()));
  Generator g(seed);
  for (size_t i = 0; i < labels.size(); ++i) {
    labels[i] = static_cast<int32_t>(g.next_below(static_cast<uint64_t>(K)));
    if (ignore_index && (i % 3 == 1 || (ignore_first && static_cast<int64_t>(i) < P))) {
      labels[i] = *ignore_index;
    }
  }
  return Tensor::from_ints(shape, labels);
}

Variable leaf(Tensor t) {
  return Variable(std::move(t), true);
}

// The gradient of sum(loss) with respect to x, as doubles.
std::vector<double> gradient_of_sum(const std::function<Variable(const Variable&)>& loss,
                                    const Tensor& x) {
  Variable v = leaf(x);
  sum(loss(v)).backward();
  EXPECT_EQ(v.grad().dtype(), x.dtype());
  return to_doubles(v.grad());
}

struct CrossEntropyCase {
  const char* name;
  Shape logits;  // (N, ..., K)
  CrossEntropyOptions options;
  bool ignore_first = false;
};

// Test names and failure messages show the case name.
void PrintTo(const CrossEntropyCase& c, std::ostream* out) {
  *out << c.name;
}

const CrossEntropyCase kCrossEntropyCases[] = {
    {"N1_K1", Shape{1, 1}, {}},
    {"N3_K5", Shape{3, 5}, {}},
    {"N7_K13_smoothing", Shape{7, 13}, {.label_smoothing = 0.1}},
    {"N7_K5_ignore", Shape{7, 5}, {.ignore_index = -100}},
    {"BTV_2x3x7_ignore_smoothing", Shape{2, 3, 7}, {.ignore_index = -100, .label_smoothing = 0.1}},
    {"BTV_3x2x5_in_range_ignore_first",
     Shape{3, 2, 5},
     {.ignore_index = 1, .label_smoothing = 0.1},
     true},
    {"N0_K5", Shape{0, 5}, {}},
    {"BTV_0x3x7", Shape{0, 3, 7}, {.ignore_index = -100, .label_smoothing = 0.1}},
};

class CrossEntropyPerExampleOp : public ::testing::TestWithParam<CrossEntropyCase> {};

TEST_P(CrossEntropyPerExampleOp, ForwardGradientsAndBf16) {
  const CrossEntropyCase& c = GetParam();
  const Tensor labels = labels_for(c.logits, c.options.ignore_index, c.ignore_first, 1);
  const Tensor logits = random_tensor(c.logits, -2, 2, 2);
  const auto op = [&](const Variable& x) {
    return softmax_cross_entropy_per_example(x, labels, c.options);
  };

  const Variable loss = op(Variable(logits));
  ASSERT_EQ(loss.shape(), Shape{c.logits[0]});
  ASSERT_EQ(loss.dtype(), DType::f32);
  const std::vector<double> ref =
      testing::cross_entropy_per_example_reference(logits, labels, c.options);
  expect_close(to_doubles(loss.value()), ref, 1e-5, 1e-5, "loss");

  expect_gradients_match([&](const auto& in) { return op(in[0]); }, {leaf(logits)},
                         {.eps = 1e-2, .atol = 1e-3, .rtol = 1e-2});

  // bf16 logits: loss and gradient within abs + |ref| * eps(bf16) of f32,
  // abs covering the rounding of logits in [-2, 2] (2^-8 relative each).
  const Tensor logits16 = logits.to(DType::bf16);
  expect_close(to_doubles(op(Variable(logits16)).value()), ref, 4 * kBf16Eps, kBf16Eps,
               "bf16 loss");
  expect_close(gradient_of_sum(op, logits16), gradient_of_sum(op, logits), 2 * kBf16Eps, kBf16Eps,
               "bf16 gradient");
}

INSTANTIATE_TEST_SUITE_P(Cases, CrossEntropyPerExampleOp, ::testing::ValuesIn(kCrossEntropyCases),
                         [](const auto& test) { return std::string(test.param.name); });

struct ElementwiseCase {
  const char* name;
  ElementwiseLoss kind;
  Shape predictions;
  Shape targets;
  DType target_dtype = DType::f32;
  double delta = 1.0;
};

// Test names and failure messages show the case name.
void PrintTo(const ElementwiseCase& c, std::ostream* out) {
  *out << c.name;
}

const ElementwiseCase kElementwiseCases[] = {
    {"bce_N1", ElementwiseLoss::binary_cross_entropy_with_logits, Shape{1, 1}, Shape{1, 1}},
    {"bce_N7_column_vs_vector", ElementwiseLoss::binary_cross_entropy_with_logits, Shape{7, 1},
     Shape{7}},
    {"bce_BTV_2x3x7", ElementwiseLoss::binary_cross_entropy_with_logits, Shape{2, 3, 7},
     Shape{2, 3, 7}},
    {"mse_N3x5", ElementwiseLoss::mean_squared_error, Shape{3, 5}, Shape{3, 5}},
    {"mse_N7_column_i32", ElementwiseLoss::mean_squared_error, Shape{7, 1}, Shape{7}, DType::i32},
    {"mse_N0", ElementwiseLoss::mean_squared_error, Shape{0, 3}, Shape{0, 3}},
    {"mae_N7x13", ElementwiseLoss::mean_absolute_error, Shape{7, 13}, Shape{7, 13}},
    {"mae_N3_column_i32", ElementwiseLoss::mean_absolute_error, Shape{3, 1}, Shape{3}, DType::i32},
    {"huber_N3x5", ElementwiseLoss::huber, Shape{3, 5}, Shape{3, 5}},
    {"huber_delta_half_2x3x7", ElementwiseLoss::huber, Shape{2, 3, 7}, Shape{2, 3, 7}, DType::f32,
     0.5},
    {"huber_N0", ElementwiseLoss::huber, Shape{0, 2}, Shape{0, 2}},
};

Variable elementwise_op(const ElementwiseCase& c, const Variable& x, const Tensor& targets) {
  switch (c.kind) {
    case ElementwiseLoss::binary_cross_entropy_with_logits:
      return binary_cross_entropy_with_logits_per_example(x, targets);
    case ElementwiseLoss::mean_squared_error:
      return mean_squared_error_per_example(x, targets);
    case ElementwiseLoss::mean_absolute_error:
      return mean_absolute_error_per_example(x, targets);
    case ElementwiseLoss::huber:
      return huber_per_example(x, targets, c.delta);
  }
  return {};
}

// f32 predictions and targets, away from the kinks: predictions are the
// targets plus an offset of magnitude in [0.1, 0.9] or [1.1, 1.9] times delta
// (both Huber regions); for binary cross-entropy targets in [0, 1] and
// predictions in [-3, 3].
std::pair<Tensor, Tensor> elementwise_inputs(const ElementwiseCase& c, uint64_t seed) {
  const int64_t n = c.predictions.numel();
  Generator g(seed);
  std::vector<float> t(static_cast<size_t>(n)), u(static_cast<size_t>(n)),
      p(static_cast<size_t>(n));
  g.uniform(t.data(), n, 0.0f, 1.0f);
  g.uniform(u.data(), n, 0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    if (c.kind == ElementwiseLoss::binary_cross_entropy_with_logits) {
      p[i] = 6.0f * u[i] - 3.0f;
      continue;
    }
    if (c.target_dtype == DType::i32) t[i] = std::round(4.0f * t[i] - 2.0f);
    const float magnitude = 0.1f + 0.8f * u[i] + (i % 2 ? 1.0f : 0.0f);
    p[i] = t[i] + static_cast<float>(c.delta) * (i % 3 ? magnitude : -magnitude);
  }
  const Tensor targets =
      c.target_dtype == DType::i32
          ? Tensor::from_ints(c.targets, std::vector<int32_t>(t.begin(), t.end()))
          : Tensor::from_floats(c.targets, t);
  return {Tensor::from_floats(c.predictions, p), targets};
}

class ElementwisePerExampleOp : public ::testing::TestWithParam<ElementwiseCase> {};

TEST_P(ElementwisePerExampleOp, ForwardGradientsAndBf16) {
  const ElementwiseCase& c = GetParam();
  const auto inputs = elementwise_inputs(c, 3);
  const Tensor predictions = inputs.first, targets = inputs.second;
  const auto op = [&](const Variable& x) { return elementwise_op(c, x, targets); };

  const Variable loss = op(Variable(predictions));
  ASSERT_EQ(loss.shape(), Shape{c.predictions[0]});
  ASSERT_EQ(loss.dtype(), DType::f32);
  const std::vector<double> ref = testing::elementwise_loss_per_example_reference(
      predictions, targets, {.kind = c.kind, .huber_delta = c.delta});
  expect_close(to_doubles(loss.value()), ref, 1e-6, 1e-5, "loss");

  // eps = 1e-2 stays inside the 0.1 * delta margin around the kinks.
  expect_gradients_match([&](const auto& in) { return op(in[0]); }, {leaf(predictions)},
                         {.eps = 1e-2, .atol = 1e-3, .rtol = 1e-2});

  // bf16 predictions (|p| < 4): the rounding moves each by at most 2^-8 * 4.
  const Tensor predictions16 = predictions.to(DType::bf16);
  expect_close(to_doubles(op(Variable(predictions16)).value()), ref, 16 * kBf16Eps, kBf16Eps,
               "bf16 loss");
  expect_close(gradient_of_sum(op, predictions16), gradient_of_sum(op, predictions), 8 * kBf16Eps,
               kBf16Eps, "bf16 gradient");
}

INSTANTIATE_TEST_SUITE_P(Cases, ElementwisePerExampleOp, ::testing::ValuesIn(kElementwiseCases),
                         [](const auto& test) { return std::string(test.param.name); });

TEST(PerExampleLoss, ScalesEachExampleByItsOwnGradient) {
  // The trainer sums the per-example losses and divides by the global batch:
  // the gradient is then each example's own gradient over that size.
  const Tensor logits = random_tensor(Shape{3, 5}, -2, 2, 4);
  const Tensor labels = Tensor::from_ints(Shape{3}, std::vector<int32_t>{0, 4, 2});
  Variable x = leaf(logits);
  scale(sum(softmax_cross_entropy_per_example(x, labels)), 1.0f / 12).backward();
  Variable y = leaf(logits);
  softmax_cross_entropy(y, labels, 12.0).backward();
  expect_close(to_doubles(x.grad()), to_doubles(y.grad()), 1e-7, 1e-5, "against the mean loss");
}

TEST(PerExampleLoss, ErrorsReachTheCaller) {
  Variable logits = leaf(random_tensor(Shape{2, 3, 7}, -1, 1, 5));
  try {
    softmax_cross_entropy_per_example(
        logits, Tensor::from_ints(Shape{2, 3}, std::vector<int32_t>{0, 1, 2, 3, 4, 9}));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("(1, 2)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(softmax_cross_entropy_per_example(
                   logits, Tensor::from_ints(Shape{2}, std::vector<int32_t>{0, 1})),
               ShapeError);
  Variable p = leaf(random_tensor(Shape{4, 2}, -1, 1, 6));
  try {
    mean_squared_error_per_example(p, Tensor::zeros(Shape{4}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("(4, 2)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(4,)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(huber_per_example(p, Tensor::zeros(Shape{4, 2}), -1.0), InvalidArgument);
  EXPECT_THROW(binary_cross_entropy_with_logits_per_example(p, Tensor::zeros(Shape{2, 4})),
               ShapeError);
}

}  // namespace
}  // namespace tandem
