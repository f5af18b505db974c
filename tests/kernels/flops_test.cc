#include <gtest/gtest.h>

#include "tandem/base/error.h"
#include "tandem/kernels/conv.h"
#include "tandem/kernels/flops.h"
#include "tandem/kernels/matmul.h"

namespace tandem::kernels {
namespace {

TEST(Flops, MatmulCountsTwiceItsMultiplyAdds) {
  const Tensor a = Tensor::full(Shape{7, 5}, 1.0f), b = Tensor::full(Shape{5, 3}, 1.0f);
  const int64_t before = flops_executed();
  matmul(a, b);
  EXPECT_EQ(flops_executed() - before, 2 * 7 * 3 * 5);
}

TEST(Flops, EachConvolutionPassCountsTheSameWork) {
  // x (2, 6, 6, 3), w (3, 3, 3, 4), stride 1, no padding: y (2, 4, 4, 4).
  const Tensor x = Tensor::full(Shape{2, 6, 6, 3}, 1.0f), w = Tensor::full(Shape{3, 3, 3, 4}, 1.0f);
  const int64_t pass = 2 * (2 * 4 * 4 * 4) * (3 * 3 * 3);
  int64_t before = flops_executed();
  const Tensor y = conv2d_forward(x, w, {}, {}, Activation::none, DType::f32);
  EXPECT_EQ(flops_executed() - before, pass);
  before = flops_executed();
  conv2d_backward_data(y, w, x.shape(), {}, DType::f32);
  EXPECT_EQ(flops_executed() - before, pass);
  Tensor dw = Tensor::empty(w.shape());
  before = flops_executed();
  conv2d_backward_weights(x, y, {}, dw, nullptr);
  EXPECT_EQ(flops_executed() - before, pass);
}

TEST(Flops, PeakMatmulRateIsPositiveAndBadArgumentsAreErrors) {
  EXPECT_GT(measure_matmul_peak(DType::f32, 128, 0.01), 1e8);
  EXPECT_GT(measure_matmul_peak(DType::bf16, 128, 0.01), 1e8);
  EXPECT_THROW(measure_matmul_peak(DType::i32, 128, 0.01), InvalidArgument);
  EXPECT_THROW(measure_matmul_peak(DType::f32, 0, 0.01), InvalidArgument);
}

}  // namespace
}  // namespace tandem::kernels
