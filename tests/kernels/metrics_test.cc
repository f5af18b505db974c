// Metric kernels against naive references: top-k (ties, k > K, ignore index),
// error sums, token cross-entropy sums; and agreement with count_correct.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "support/gradcheck.h"
#include "support/loss_reference.h"
#include "support/reference.h"
#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/kernels/loss.h"
#include "tandem/kernels/metrics.h"
#include "tandem/kernels/per_example_loss.h"

namespace tandem {
namespace {

using testing::random_tensor;
using testing::to_doubles;

// Labels (rows,) of the logits' leading dims: uniform classes, every fourth
// position set to ignore_index when there is one.
Tensor labels_for(const Shape& logits, std::optional<int32_t> ignore_index, uint64_t seed) {
  std::vector<int64_t> dims = logits.to_vector();
  const int64_t K = dims.back();
  dims.pop_back();
  const Shape shape(dims);
  std::vector<int32_t> labels(static_cast<size_t>(shape.numel()));
  Generator g(seed);
  for (size_t i = 0; i < labels.size(); ++i) {
    labels[i] = static_cast<int32_t>(g.next_below(static_cast<uint64_t>(K)));
    if (ignore_index && i % 4 == 2) labels[i] = *ignore_index;
  }
  return Tensor::from_ints(shape, labels);
}

// Logits with many ties: small integers.
Tensor tied_logits(const Shape& shape, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  Generator g(seed);
  for (float& x : v) x = static_cast<float>(g.next_below(4));
  return Tensor::from_floats(shape, v);
}

struct TopKCase {
  Shape logits;
  int k;
  std::optional<int32_t> ignore_index;
  bool ties;
};

TEST(Metrics, TopKCorrectMatchesReference) {
  const TopKCase cases[] = {
      {Shape{1, 1}, 1, std::nullopt, false},  {Shape{3, 5}, 1, std::nullopt, true},
      {Shape{7, 13}, 3, std::nullopt, false}, {Shape{7, 13}, 2, -100, true},
      {Shape{7, 5}, 5, std::nullopt, true},   {Shape{3, 5}, 9, std::nullopt, false},
      {Shape{2, 3, 7}, 1, -100, true},        {Shape{2, 3, 7}, 2, 0, false},
      {Shape{0, 5}, 1, std::nullopt, false},  {Shape{0, 3, 7}, 2, -100, false},
  };
  for (const TopKCase& c : cases) {
    SCOPED_TRACE(c.logits.to_string() + " k=" + std::to_string(c.k));
    const Tensor labels = labels_for(c.logits, c.ignore_index, 1);
    for (DType d : {DType::f32, DType::bf16}) {
      const Tensor logits =
          (c.ties ? tied_logits(c.logits, 2) : random_tensor(c.logits, -3, 3, 2)).to(d);
      const kernels::MetricSums got = kernels::top_k_correct(logits, labels, c.k, c.ignore_index);
      const kernels::MetricSums want = testing::top_k_reference(
          to_doubles(logits), c.logits[-1], labels.to_ints(), c.k, c.ignore_index);
      EXPECT_EQ(got.sum, want.sum);
      EXPECT_EQ(got.count, want.count);
    }
  }
}

TEST(Metrics, TopOneAgreesWithCountCorrectOnUntiedLogits) {
  for (const Shape& shape : {Shape{1, 1}, Shape{3, 5}, Shape{7, 13}, Shape{64, 10}}) {
    const Tensor logits = testing::distinct_tensor(shape, 0.0f, 3);
    const Tensor labels = labels_for(shape, std::nullopt, 4);
    const kernels::MetricSums s = kernels::top_k_correct(logits, labels, 1, std::nullopt);
    EXPECT_EQ(s.sum, static_cast<double>(kernels::count_correct(logits, labels)));
    EXPECT_EQ(s.count, static_cast<double>(shape[0]));
  }
}

TEST(Metrics, TopKTiesCountOnlyWhenFewerThanKAreLarger) {
  const Tensor logits = Tensor::from_floats(Shape{3, 4}, std::vector<float>{1, 2, 2, 0,  //
                                                                            2, 2, 2, 2,  //
                                                                            3, 1, 2, 2});
  const Tensor labels = Tensor::from_ints(Shape{3}, std::vector<int32_t>{1, 3, 2});
  // Row 0: label tied for the top; row 1: all tied; row 2: one logit larger.
  EXPECT_EQ(kernels::top_k_correct(logits, labels, 1).sum, 2.0);
  EXPECT_EQ(kernels::top_k_correct(logits, labels, 2).sum, 3.0);
}

// A row whose label's logit is NaN predicted nothing: not correct, as
// count_correct has it (no logit compares larger than a NaN).
TEST(Metrics, TopKCountsNoRowWithANaNLogitForItsLabel) {
  const Tensor logits = Tensor::from_floats(Shape{2, 3}, std::vector<float>{NAN, NAN, NAN,  //
                                                                            0, NAN, 1});
  const Tensor labels = Tensor::from_ints(Shape{2}, std::vector<int32_t>{0, 1});
  EXPECT_EQ(kernels::top_k_correct(logits, labels, 1).sum, 0.0);
  EXPECT_EQ(kernels::top_k_correct(logits, labels, 3).sum, 0.0);
}

TEST(Metrics, ErrorSumsMatchReference) {
  struct Case {
    Shape predictions, targets;
    DType target_dtype;
  };
  const Case cases[] = {{Shape{1, 1}, Shape{1, 1}, DType::f32},
                        {Shape{7, 1}, Shape{7}, DType::f32},
                        {Shape{3}, Shape{3, 1}, DType::i32},
                        {Shape{2, 3, 7}, Shape{2, 3, 7}, DType::f32},
                        {Shape{0, 3}, Shape{0, 3}, DType::f32}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.predictions.to_string());
    Tensor targets = random_tensor(c.targets, -2, 2, 5);
    if (c.target_dtype == DType::i32) targets = targets.to(DType::i32);
    for (DType d : {DType::f32, DType::bf16}) {
      const Tensor p = random_tensor(c.predictions, -2, 2, 6).to(d);
      const std::vector<double> ps = to_doubles(p), ts = to_doubles(targets);
      double abs_sum = 0.0, sq_sum = 0.0;
      for (size_t i = 0; i < ps.size(); ++i) {
        abs_sum += std::abs(ps[i] - ts[i]);
        sq_sum += (ps[i] - ts[i]) * (ps[i] - ts[i]);
      }
      const kernels::MetricSums a = kernels::absolute_error_sums(p, targets);
      const kernels::MetricSums s = kernels::squared_error_sums(p, targets);
      EXPECT_NEAR(a.sum, abs_sum, 1e-9 * (1 + abs_sum));
      EXPECT_NEAR(s.sum, sq_sum, 1e-9 * (1 + sq_sum));
      EXPECT_EQ(a.count, static_cast<double>(ps.size()));
      EXPECT_EQ(s.count, static_cast<double>(ps.size()));
    }
  }
  EXPECT_THROW(kernels::absolute_error_sums(Tensor::zeros(Shape{4, 2}), Tensor::zeros(Shape{4})),
               ShapeError);
}

TEST(Metrics, TokenCrossEntropySumsMatchReference) {
  for (const Shape& shape : {Shape{1, 1}, Shape{7, 13}, Shape{2, 3, 7}, Shape{0, 3, 7}}) {
    for (std::optional<int32_t> ignore : {std::optional<int32_t>(), std::optional<int32_t>(-100)}) {
      SCOPED_TRACE(shape.to_string());
      const Tensor logits = random_tensor(shape, -4, 4, 7);
      const Tensor labels = labels_for(shape, ignore, 8);
      const std::vector<double> token =
          testing::token_cross_entropy_reference(logits, labels, ignore, 0.0);
      kernels::MetricSums want;
      for (double v : token) {
        if (std::isnan(v)) continue;
        want.sum += v;
        want.count += 1;
      }
      const kernels::MetricSums got = kernels::token_cross_entropy_sums(logits, labels, ignore);
      EXPECT_NEAR(got.sum, want.sum, 1e-5 * (1 + want.sum));
      EXPECT_EQ(got.count, want.count);
    }
  }
  // Labels are checked as in the loss.
  EXPECT_THROW(
      kernels::token_cross_entropy_sums(random_tensor(Shape{2, 3}, -1, 1, 9),
                                        Tensor::from_ints(Shape{2}, std::vector<int32_t>{0, 3})),
      InvalidArgument);
  EXPECT_THROW(kernels::top_k_correct(random_tensor(Shape{2, 3}, -1, 1, 9),
                                      Tensor::from_ints(Shape{2}, std::vector<int32_t>{0, 1}), 0),
               InvalidArgument);
}

TEST(Metrics, SumsAddOverReplicasExactly) {
  // Two halves of a batch add up to the whole batch's sums.
  const Tensor logits = random_tensor(Shape{8, 5}, -2, 2, 10);
  const Tensor labels = labels_for(logits.shape(), -1, 11);
  kernels::MetricSums halves =
      kernels::top_k_correct(logits.slice(0, 3), labels.slice(0, 3), 2, -1);
  halves += kernels::top_k_correct(logits.slice(3, 8), labels.slice(3, 8), 2, -1);
  const kernels::MetricSums whole = kernels::top_k_correct(logits, labels, 2, -1);
  EXPECT_EQ(halves.sum, whole.sum);
  EXPECT_EQ(halves.count, whole.count);
}

}  // namespace
}  // namespace tandem
