// The operand checks every device's kernel shares (kernels/detail/checks.h):
// each public kernel refuses what cannot work before it dispatches, with a
// message naming the operand, so the CUDA files no longer repeat them
// (tests/gpu/gpu_test.cc runs the same refusals on a GPU). Tensors of
// different virtual CPU devices share the host's memory and may meet.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "support/errors.h"
#include "tandem/base/error.h"
#include "tandem/kernels/elementwise.h"
#include "tandem/kernels/embedding.h"
#include "tandem/kernels/loss.h"
#include "tandem/kernels/normalization.h"
#include "tandem/kernels/per_example_loss.h"
#include "tandem/kernels/reduce.h"
#include "tandem/kernels/softmax.h"

namespace tandem {
namespace {

using testing::error_message;
using testing::expect_contains;

Tensor ones(const Shape& s, DType d = DType::f32, Device device = cpu_device()) {
  return Tensor::full(s, 1.0f, d, device);
}

TEST(OperandChecks, RowKernelsNeedRowsAndMatchingOperands) {
  expect_contains(error_message<ShapeError>([] { kernels::softmax(ones(Shape{})); }),
                  "softmax needs rank >= 1");
  expect_contains(error_message<ShapeError>([] {
                    kernels::log_softmax_backward(ones(Shape{2, 3}), ones(Shape{2, 4}));
                  }),
                  "log_softmax_backward: operands differ");
  expect_contains(error_message<ShapeError>([] {
                    kernels::softmax_backward(ones(Shape{2, 3}), ones(Shape{2, 3}, DType::bf16));
                  }),
                  "softmax_backward: operands differ");
}

TEST(OperandChecks, IndexAndLabelValuesAreNamed) {
  const Tensor table = ones(Shape{5, 2});
  const Tensor bad = Tensor::from_ints(Shape{3}, std::vector<int32_t>{0, 9, 1});
  expect_contains(error_message<InvalidArgument>([&] { kernels::embedding(table, bad); }),
                  "embedding: index 9 at position 1 is outside [0, 5)");
  expect_contains(error_message<InvalidArgument>([&] {
                    kernels::embedding_backward(ones(Shape{3, 2}), bad, 5);
                  }),
                  "embedding_backward: index 9 at position 1");
  // dy of as many values as the indices hold rows of, but not their shape
  // (it was read past its end).
  const Tensor eight = Tensor::from_ints(Shape{8}, std::vector<int32_t>(8, 1));
  expect_contains(error_message<ShapeError>([&] {
                    kernels::embedding_backward(ones(Shape{4, 6}), eight, 5);
                  }),
                  "must be indices' shape and a width");
  EXPECT_THROW(kernels::embedding_backward(ones(Shape{2, 3, 4}), eight.reshape(Shape{2, 4}), 5),
               ShapeError);
  expect_contains(error_message<ShapeError>([&] { kernels::embedding(table, ones(Shape{3})); }),
                  "index values must be i32");
  const Tensor labels = Tensor::from_ints(Shape{2}, std::vector<int32_t>{1, -1});
  expect_contains(error_message<InvalidArgument>([&] {
                    kernels::softmax_cross_entropy(ones(Shape{2, 3}), labels);
                  }),
                  "softmax_cross_entropy: label -1 at row 1 is outside [0, 3)");
  expect_contains(error_message<InvalidArgument>([&] {
                    kernels::count_correct(ones(Shape{2, 3}), labels);
                  }),
                  "count_correct: label -1 at row 1");
}

// The backward passes take the shapes only: the forward pass checked the
// values, and reading them again would stall a GPU's stream. A label out of
// range gets no target: finite gradients, nothing read out of bounds.
TEST(OperandChecks, BackwardPassesCheckShapesNotLabelValues) {
  const Tensor logits = ones(Shape{2, 3});
  const Tensor bad = Tensor::from_ints(Shape{2}, std::vector<int32_t>{1, 7});
  const Tensor probabilities = Tensor::full(Shape{2, 3}, 1.0f / 3.0f, DType::f32);
  for (float v : kernels::softmax_cross_entropy_backward(probabilities, bad, 1.0f, 0.0, DType::f32)
                     .to_floats())
    EXPECT_TRUE(std::isfinite(v));
  const Tensor lse = Tensor::zeros(Shape{2}, DType::f32);
  const Tensor g =
      kernels::softmax_cross_entropy_per_example_backward(ones(Shape{2}), logits, bad, lse, {});
  for (float v : g.to_floats()) EXPECT_TRUE(std::isfinite(v));
  expect_contains(error_message<ShapeError>([&] {
                    kernels::softmax_cross_entropy_per_example_backward(
                        ones(Shape{2}), logits,
                        Tensor::from_ints(Shape{3}, std::vector<int32_t>{0, 0, 0}), lse, {});
                  }),
                  "labels must be i32 with the leading dims of logits");
  expect_contains(error_message<ShapeError>([&] {
                    kernels::softmax_cross_entropy_per_example_backward(
                        ones(Shape{3}), logits,
                        Tensor::from_ints(Shape{2}, std::vector<int32_t>{0, 0}), lse, {});
                  }),
                  "grad_loss must be floating (2,)");
}

// Layer norm's statistics (per row) and batch norm's sums (per column) are
// read by index: their lengths are checked like the parameters'.
TEST(OperandChecks, NormalizationStatisticsHaveTheirLengths) {
  const Tensor x = ones(Shape{4, 3}), dy = ones(Shape{4, 3}), gamma = ones(Shape{3});
  const Tensor per_row = ones(Shape{4}), short_stat = ones(Shape{2});
  expect_contains(error_message<ShapeError>(
                      [&] { kernels::layer_norm_backward(dy, x, per_row, short_stat, gamma); }),
                  "layer_norm_backward: rstd must be f32 with 4 elements");
  expect_contains(error_message<ShapeError>(
                      [&] { kernels::layer_norm_backward(dy, x, Tensor(), per_row, gamma); }),
                  "layer_norm_backward: the mean must be f32 with 4 elements");
  expect_contains(
      error_message<ShapeError>([&] { kernels::rms_norm_backward(dy, x, short_stat, gamma); }),
      "rms_norm_backward: rstd must be f32 with 4 elements");
  expect_contains(error_message<ShapeError>([&] {
                    kernels::rms_norm_backward(ones(Shape{4, 2}), x, per_row, gamma);
                  }),
                  "rms_norm_backward: dy");
  const Tensor per_column = ones(Shape{3});
  const kernels::BatchNormSums sums{per_column, per_column};
  expect_contains(error_message<InvalidArgument>([&] {
                    kernels::batch_norm_backward_dx(dy, x, per_column, per_column, gamma, sums, 0);
                  }),
                  "batch_norm_backward: 0 values per channel");
  expect_contains(error_message<ShapeError>([&] {
                    kernels::batch_norm_backward_dx(dy, x, per_column, per_column, gamma,
                                                    {short_stat, per_column}, 4);
                  }),
                  "batch_norm_backward: sum_dy must be f32 with 3 elements");
  expect_contains(error_message<ShapeError>([&] {
                    kernels::batch_norm_backward_dx(ones(Shape{4, 2}), x, per_column, per_column,
                                                    gamma, sums, 4);
                  }),
                  "batch_norm_backward: dy");
  expect_contains(
      error_message<ShapeError>([&] { kernels::inverse_std(ones(Shape{3}, DType::bf16), 1e-5f); }),
      "inverse_std: the variance must be f32");
}

TEST(OperandChecks, VirtualCpuDevicesShareTheHostsMemory) {
  const Tensor a = ones(Shape{2, 3}, DType::f32, cpu_device(0));
  const Tensor b = ones(Shape{3}, DType::f32, cpu_device(1));
  EXPECT_EQ(kernels::add(a, b).to_floats(), std::vector<float>(6, 2.0f));
  Tensor dst = ones(Shape{3}, DType::f32, cpu_device(1));
  kernels::add_into(dst, b, 2.0f);
  EXPECT_EQ(dst.to_floats(), std::vector<float>(3, 3.0f));
  const Tensor labels = Tensor::from_ints(Shape{2}, std::vector<int32_t>{0, 2}, cpu_device(0));
  EXPECT_NO_THROW(
      kernels::softmax_cross_entropy(ones(Shape{2, 3}, DType::f32, cpu_device(1)), labels));
}

TEST(OperandChecks, SumToShapeTakesAnyBroadcastTargetAndRefusesOthers) {
  const Tensor x = ones(Shape{4, 5});
  EXPECT_EQ(kernels::sum_to_shape(x, Shape{1, 1}).to_floats(), std::vector<float>{20.0f});
  EXPECT_EQ(kernels::sum_to_shape(x, Shape{5}).to_floats(), std::vector<float>(5, 4.0f));
  // A target of no elements (a bias of width 0): empty, not a division by zero.
  EXPECT_EQ(kernels::sum_to_shape(ones(Shape{3, 0}), Shape{0}).shape(), Shape{0});
  expect_contains(error_message<ShapeError>([&] { kernels::sum_to_shape(x, Shape{4}); }),
                  "sum_to_shape: (4,) is not a broadcast target of (4, 5)");
  expect_contains(error_message<ShapeError>([&] { kernels::add(x, ones(Shape{4})); }),
                  "add: cannot combine");
  expect_contains(error_message<ShapeError>([&] {
                    Tensor small = ones(Shape{3});
                    kernels::add_into(small, x);
                  }),
                  "add_into:");
}

}  // namespace
}  // namespace tandem
