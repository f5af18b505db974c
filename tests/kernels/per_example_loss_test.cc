// Per-example loss kernels against the double references in
// support/loss_reference.h: forward and backward, f32, bf16 and f16 inputs,
// odd shapes (N = 0, 1, 3, 7; K = 1, 5, 13; (B, T, V)), and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <ostream>
#include <string>

#include "support/errors.h"
#include "support/gradcheck.h"
#include "support/loss_reference.h"
#include "support/reference.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/random.h"
#include "tandem/kernels/per_example_loss.h"

namespace tandem {
namespace {

using testing::error_message;
using testing::expect_contains;

using kernels::CrossEntropyOptions;
using kernels::ElementwiseLoss;
using kernels::ElementwiseLossOptions;
using testing::dtype_rtol;
using testing::expect_close;
using testing::random_tensor;
using testing::to_doubles;

// Labels of logits (N, ..., K): uniform classes; with an ignore index, every
// third position and (ignore_first) all of example 0 are set to it.
Tensor make_labels(const Shape& logits, std::optional<int32_t> ignore_index, bool ignore_first,
                   uint64_t seed) {
  std::vector<int64_t> dims = logits.to_vector();
  const int64_t K = dims.back();
  dims.pop_back();
  const Shape shape(dims);
  const int64_t P = shape.rank() > 0 && shape[0] > 0 ? shape.numel() / shape[0] : 0;
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

std::vector<double> random_doubles(int64_t n, uint64_t seed) {
  const std::vector<float> f = random_tensor(Shape{n}, -1, 1, seed).to_floats();
  return {f.begin(), f.end()};
}

struct CrossEntropyCase {
  const char* name;
  Shape logits;  // (N, ..., K)
  CrossEntropyOptions options;
  bool ignore_first = false;  // every position of example 0 ignored
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
    {"N1_K13_ignore_all", Shape{1, 13}, {.ignore_index = -100}, true},
    {"BTV_2x3x7_ignore_smoothing", Shape{2, 3, 7}, {.ignore_index = -100, .label_smoothing = 0.1}},
    {"BTV_3x4x5_in_range_ignore",
     Shape{3, 4, 5},
     {.ignore_index = 2, .label_smoothing = 0.1},
     true},
    {"rank4_2x2x3x13", Shape{2, 2, 3, 13}, {.label_smoothing = 0.1}},
    {"N0_K5", Shape{0, 5}, {}},
    {"BTV_0x3x7_ignore", Shape{0, 3, 7}, {.ignore_index = -100, .label_smoothing = 0.1}},
};

class CrossEntropyPerExampleTest : public ::testing::TestWithParam<CrossEntropyCase> {};

TEST_P(CrossEntropyPerExampleTest, ForwardAndBackwardMatchReference) {
  const CrossEntropyCase& c = GetParam();
  const Tensor labels = make_labels(c.logits, c.options.ignore_index, c.ignore_first, 3);
  const int64_t N = c.logits[0];
  const std::vector<double> grad_loss = random_doubles(N, 4);
  const std::vector<float> grad_loss_f(grad_loss.begin(), grad_loss.end());
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(d));
    const Tensor logits = random_tensor(c.logits, -4, 4, 2).to(d);
    const kernels::CrossEntropyPerExample r =
        kernels::softmax_cross_entropy_per_example(logits, labels, c.options);
    ASSERT_EQ(r.loss.shape(), Shape{N});
    ASSERT_EQ(r.loss.dtype(), DType::f32);
    // The reference reads the rounded logits, so only f32 arithmetic differs.
    expect_close(to_doubles(r.loss),
                 testing::cross_entropy_per_example_reference(logits, labels, c.options), 1e-5,
                 1e-5, "loss");
    const Tensor grad = kernels::softmax_cross_entropy_per_example_backward(
        Tensor::from_floats(Shape{N}, grad_loss_f), logits, labels, r.log_sum_exp, c.options);
    ASSERT_EQ(grad.shape(), logits.shape());
    ASSERT_EQ(grad.dtype(), d);
    expect_close(
        to_doubles(grad),
        testing::cross_entropy_per_example_grad_reference(logits, labels, c.options, grad_loss),
        1e-6, d == DType::f32 ? 1e-4 : dtype_rtol(d), "gradient");
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CrossEntropyPerExampleTest, ::testing::ValuesIn(kCrossEntropyCases),
                         [](const auto& test) { return std::string(test.param.name); });

TEST(CrossEntropyPerExample, StableForHugeLogits) {
  const Tensor logits =
      Tensor::from_floats(Shape{2, 3}, std::vector<float>{1000, 0, -1000, -1000, 0, 1000});
  const Tensor labels = Tensor::from_ints(Shape{2}, std::vector<int32_t>{2, 2});
  const auto r = kernels::softmax_cross_entropy_per_example(logits, labels);
  const std::vector<float> loss = r.loss.to_floats();
  EXPECT_NEAR(loss[0], 2000.0f, 1e-2);
  EXPECT_NEAR(loss[1], 0.0f, 1e-6);
  const auto smoothed =
      kernels::softmax_cross_entropy_per_example(logits, labels, {.label_smoothing = 0.1});
  for (float v : smoothed.loss.to_floats()) EXPECT_TRUE(std::isfinite(v));
  const Tensor grad = kernels::softmax_cross_entropy_per_example_backward(
      Tensor::full(Shape{2}, 1.0f), logits, labels, r.log_sum_exp);
  for (float v : grad.to_floats()) EXPECT_TRUE(std::isfinite(v));
}

TEST(CrossEntropyPerExample, SameBitsWhateverTheThreadCount) {
  const Tensor logits = random_tensor(Shape{5, 37, 11}, -3, 3, 5);
  const Tensor labels = make_labels(logits.shape(), -1, false, 6);
  const CrossEntropyOptions options{.ignore_index = -1, .label_smoothing = 0.1};
  std::vector<float> one, many;
  {
    NumThreadsScope threads(1);
    one = kernels::softmax_cross_entropy_per_example(logits, labels, options).loss.to_floats();
  }
  {
    NumThreadsScope threads(2);
    many = kernels::softmax_cross_entropy_per_example(logits, labels, options).loss.to_floats();
  }
  EXPECT_EQ(one, many);
}

TEST(CrossEntropyPerExample, ErrorsNameThePositionTheValueAndTheShapes) {
  const Tensor logits = random_tensor(Shape{2, 3, 7}, -1, 1, 7);
  std::vector<int32_t> l = {0, 1, 2, 3, 4, 9};
  std::string m = error_message<InvalidArgument>([&] {
    kernels::softmax_cross_entropy_per_example(logits, Tensor::from_ints(Shape{2, 3}, l));
  });
  expect_contains(m, "label 9");
  expect_contains(m, "(1, 2)");
  expect_contains(m, "[0, 7)");
  // -100 is only accepted as the ignore index.
  l[5] = -100;
  EXPECT_THROW(
      kernels::softmax_cross_entropy_per_example(logits, Tensor::from_ints(Shape{2, 3}, l)),
      InvalidArgument);
  EXPECT_NO_THROW(kernels::softmax_cross_entropy_per_example(
      logits, Tensor::from_ints(Shape{2, 3}, l), {.ignore_index = -100}));
  m = error_message<ShapeError>([&] {
    kernels::softmax_cross_entropy_per_example(
        logits, Tensor::from_ints(Shape{2, 2}, std::vector<int32_t>{0, 1, 2, 3}));
  });
  expect_contains(m, "(2, 3, 7)");
  expect_contains(m, "(2, 2)");
  EXPECT_THROW(kernels::softmax_cross_entropy_per_example(logits, Tensor::zeros(Shape{2, 3})),
               ShapeError);  // f32 labels
  EXPECT_THROW(
      kernels::softmax_cross_entropy_per_example(
          Tensor::zeros(Shape{2, 0}), Tensor::from_ints(Shape{2}, std::vector<int32_t>{0, 0})),
      ShapeError);  // no classes
  EXPECT_THROW(kernels::softmax_cross_entropy_per_example(
                   logits, Tensor::from_ints(Shape{2, 3}, std::vector<int32_t>{0, 1, 2, 3, 4, 5}),
                   {.label_smoothing = 1.5}),
               InvalidArgument);
}

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
    {"mse_N0", ElementwiseLoss::mean_squared_error, Shape{0, 4}, Shape{0, 4}},
    {"mae_N7x13", ElementwiseLoss::mean_absolute_error, Shape{7, 13}, Shape{7, 13}},
    {"mae_vector_vs_column_i32", ElementwiseLoss::mean_absolute_error, Shape{3}, Shape{3, 1},
     DType::i32},
    {"huber_N3x5", ElementwiseLoss::huber, Shape{3, 5}, Shape{3, 5}},
    {"huber_delta_half_2x3x7", ElementwiseLoss::huber, Shape{2, 3, 7}, Shape{2, 3, 7}, DType::f32,
     0.5},
    {"huber_N0", ElementwiseLoss::huber, Shape{0}, Shape{0}},
};

// Targets and f32 predictions for a case. Predictions are the targets plus an
// offset of magnitude in [0.1, 0.9] or [1.1, 1.9] times delta (both Huber
// regions, away from the kinks of MAE and Huber); for binary cross-entropy,
// targets are in [0, 1] and predictions in [-3, 3].
std::pair<Tensor, Tensor> elementwise_inputs(const ElementwiseCase& c, uint64_t seed) {
  const int64_t n = c.predictions.numel();
  Generator g(seed);
  std::vector<float> t(static_cast<size_t>(n)), p(static_cast<size_t>(n));
  g.uniform(t.data(), n, 0.0f, 1.0f);
  std::vector<float> u(static_cast<size_t>(n));
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

class ElementwisePerExampleTest : public ::testing::TestWithParam<ElementwiseCase> {};

TEST_P(ElementwisePerExampleTest, ForwardAndBackwardMatchReference) {
  const ElementwiseCase& c = GetParam();
  const auto [predictions32, targets] = elementwise_inputs(c, 8);
  const ElementwiseLossOptions options{.kind = c.kind, .huber_delta = c.delta};
  const int64_t N = c.predictions[0];
  const std::vector<double> grad_loss = random_doubles(N, 9);
  const std::vector<float> grad_loss_f(grad_loss.begin(), grad_loss.end());
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(d));
    const Tensor predictions = predictions32.to(d);
    const Tensor loss = kernels::elementwise_loss_per_example(predictions, targets, options);
    ASSERT_EQ(loss.shape(), Shape{N});
    ASSERT_EQ(loss.dtype(), DType::f32);
    expect_close(to_doubles(loss),
                 testing::elementwise_loss_per_example_reference(predictions, targets, options),
                 1e-6, 1e-5, "loss");
    const Tensor grad = kernels::elementwise_loss_per_example_backward(
        Tensor::from_floats(Shape{N}, grad_loss_f), predictions, targets, options);
    ASSERT_EQ(grad.shape(), predictions.shape());
    ASSERT_EQ(grad.dtype(), d);
    expect_close(to_doubles(grad),
                 testing::elementwise_loss_per_example_grad_reference(predictions, targets, options,
                                                                      grad_loss),
                 1e-6, d == DType::f32 ? 1e-5 : dtype_rtol(d), "gradient");
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ElementwisePerExampleTest, ::testing::ValuesIn(kElementwiseCases),
                         [](const auto& test) { return std::string(test.param.name); });

TEST(ElementwisePerExample, KinksAndLargeLogits) {
  // MAE's subgradient at 0 is 0; Huber's gradient is continuous at |d| = delta.
  const Tensor p = Tensor::from_floats(Shape{1, 3}, std::vector<float>{1, 2, -1});
  const Tensor t = Tensor::from_floats(Shape{1, 3}, std::vector<float>{1, 1, 0});
  const Tensor one = Tensor::full(Shape{1}, 1.0f);
  EXPECT_EQ(kernels::elementwise_loss_per_example_backward(
                one, p, t, {.kind = ElementwiseLoss::mean_absolute_error})
                .to_floats(),
            (std::vector<float>{0.0f, 1.0f / 3, -1.0f / 3}));
  EXPECT_EQ(
      kernels::elementwise_loss_per_example_backward(one, p, t, {.kind = ElementwiseLoss::huber})
          .to_floats(),
      (std::vector<float>{0.0f, 1.0f / 3, -1.0f / 3}));
  const Tensor x = Tensor::from_floats(Shape{2, 1}, std::vector<float>{200, -200});
  const Tensor y = Tensor::from_floats(Shape{2}, std::vector<float>{0, 0});
  const auto bce =
      ElementwiseLossOptions{.kind = ElementwiseLoss::binary_cross_entropy_with_logits};
  const std::vector<float> loss = kernels::elementwise_loss_per_example(x, y, bce).to_floats();
  EXPECT_NEAR(loss[0], 200.0f, 1e-3);
  EXPECT_NEAR(loss[1], 0.0f, 1e-6);
  const std::vector<float> grad =
      kernels::elementwise_loss_per_example_backward(Tensor::full(Shape{2}, 1.0f), x, y, bce)
          .to_floats();
  EXPECT_NEAR(grad[0], 1.0f, 1e-6);
  EXPECT_NEAR(grad[1], 0.0f, 1e-6);
}

TEST(ElementwisePerExample, ErrorsNameBothShapes) {
  const ElementwiseLossOptions mse{.kind = ElementwiseLoss::mean_squared_error};
  std::string m = error_message<ShapeError>([&] {
    kernels::elementwise_loss_per_example(Tensor::zeros(Shape{4, 2}), Tensor::zeros(Shape{4}), mse);
  });
  expect_contains(m, "(4, 2)");
  expect_contains(m, "(4,)");
  EXPECT_THROW(kernels::elementwise_loss_per_example(Tensor::zeros(Shape{4, 1}),
                                                     Tensor::zeros(Shape{5}), mse),
               ShapeError);
  EXPECT_THROW(kernels::elementwise_loss_per_example(Tensor::zeros(Shape{2, 3}),
                                                     Tensor::zeros(Shape{3, 2}), mse),
               ShapeError);
  EXPECT_THROW(kernels::elementwise_loss_per_example(Tensor::zeros(Shape{4}),
                                                     Tensor::zeros(Shape{4}, DType::u8), mse),
               ShapeError);
  EXPECT_THROW(
      kernels::elementwise_loss_per_example(Tensor::zeros(Shape{4}), Tensor::zeros(Shape{4}),
                                            {.kind = ElementwiseLoss::huber, .huber_delta = 0.0}),
      InvalidArgument);
  EXPECT_THROW(kernels::elementwise_loss_per_example_backward(
                   Tensor::zeros(Shape{3}), Tensor::zeros(Shape{4}), Tensor::zeros(Shape{4}), mse),
               ShapeError);  // grad_loss of the wrong length
}

}  // namespace
}  // namespace tandem
