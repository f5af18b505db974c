// resize_bilinear against a naive double-precision bilinear reference with
// half-pixel centres (tf.image.resize bilinear / PyTorch align_corners=False),
// over odd sizes, up- and downscaling, 1xN images, C = 1 and 3, f32 and u8.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "support/gradcheck.h"
#include "support/reference.h"
#include "tandem/base/error.h"
#include "tandem/kernels/resize.h"

namespace tandem {
namespace {

using testing::expect_close;
using testing::resize_reference;
using testing::to_doubles;

struct ResizeCase {
  Shape input;  // (N, H, W, C) or (H, W, C)
  int64_t height, width;
};

class ResizeTest : public ::testing::TestWithParam<ResizeCase> {};

TEST_P(ResizeTest, MatchesNaiveBilinearReference) {
  const ResizeCase c = GetParam();
  const bool single = c.input.rank() == 3;
  const Shape batch = single ? Shape{1, c.input[0], c.input[1], c.input[2]} : c.input;
  const Shape expected_shape = single ? Shape{c.height, c.width, c.input[2]}
                                      : Shape{c.input[0], c.height, c.width, c.input[3]};
  // f32: the reference sees the same inputs; oneDNN computes in f32.
  const Tensor x = testing::random_tensor(c.input, -1, 1, 7);
  const Tensor y = kernels::resize_bilinear(x, c.height, c.width);
  ASSERT_EQ(y.shape(), expected_shape);
  ASSERT_EQ(y.dtype(), DType::f32);
  expect_close(to_doubles(y), resize_reference(to_doubles(x), batch, c.height, c.width), 1e-5, 1e-5,
               "f32 resize");
  // u8: every output is the reference rounded (a tie may go either way).
  std::vector<float> values = testing::random_tensor(c.input, 0, 255, 8).to_floats();
  for (float& v : values) v = std::round(v);
  const Tensor x8 = Tensor::from_floats(c.input, values, DType::u8);
  const Tensor y8 = kernels::resize_bilinear(x8, c.height, c.width);
  ASSERT_EQ(y8.shape(), expected_shape);
  ASSERT_EQ(y8.dtype(), DType::u8);
  expect_close(to_doubles(y8), resize_reference(to_doubles(x8), batch, c.height, c.width),
               0.5 + 1e-3, 0, "u8 resize");
}

INSTANTIATE_TEST_SUITE_P(Sizes, ResizeTest,
                         ::testing::Values(ResizeCase{Shape{5, 7, 3}, 11, 13},     // upscale, odd
                                           ResizeCase{Shape{17, 13, 1}, 5, 3},     // downscale
                                           ResizeCase{Shape{2, 9, 11, 3}, 4, 17},  // mixed, a batch
                                           ResizeCase{Shape{1, 23, 1}, 1, 7},      // 1xN
                                           ResizeCase{Shape{1, 1, 3}, 3, 5},       // one pixel
                                           ResizeCase{Shape{6, 6, 3}, 6, 6},       // identity
                                           ResizeCase{Shape{31, 29, 3}, 8, 8},  // large factor down
                                           ResizeCase{Shape{3, 2, 1}, 1, 1},    // to one pixel
                                           ResizeCase{Shape{3, 37, 5, 1}, 37, 2}));  // width only

TEST(Resize, KnownValuesAndEdges) {
  // Doubling [0, 10] samples at -0.25, 0.25, 0.75, 1.25: clamped at the ends.
  const Tensor x = Tensor::from_floats(Shape{1, 2, 1}, std::vector<float>{0, 10});
  EXPECT_EQ(kernels::resize_bilinear(x, 1, 4).to_floats(), (std::vector<float>{0, 2.5, 7.5, 10}));
  // u8 rounds: 1/3 and 2/3 of the way from 0 to 100.
  const Tensor x8 = Tensor::from_floats(Shape{1, 2, 1}, std::vector<float>{0, 100}, DType::u8);
  const Tensor y8 = kernels::resize_bilinear(x8, 1, 6);
  EXPECT_EQ(y8.to_floats(), (std::vector<float>{0, 0, 33, 67, 100, 100}));
}

TEST(Resize, BadArgumentsThrow) {
  const Tensor x = Tensor::zeros(Shape{4, 4, 3});
  EXPECT_THROW(kernels::resize_bilinear(x, 0, 4), InvalidArgument);
  EXPECT_THROW(kernels::resize_bilinear(x, 4, -1), InvalidArgument);
  EXPECT_THROW(kernels::resize_bilinear(x, int64_t{1} << 40, int64_t{1} << 40), InvalidArgument);
  EXPECT_THROW(kernels::resize_bilinear(Tensor::zeros(Shape{4, 4}), 2, 2), ShapeError);
  EXPECT_THROW(kernels::resize_bilinear(x.to(DType::i32), 2, 2), ShapeError);
  EXPECT_THROW(kernels::resize_bilinear(Tensor::zeros(Shape{0, 4, 3}), 2, 2), ShapeError);
  // An empty batch resizes to an empty batch.
  EXPECT_EQ(kernels::resize_bilinear(Tensor::zeros(Shape{0, 4, 4, 3}), 2, 2).shape(),
            (Shape{0, 2, 2, 3}));
}

}  // namespace
}  // namespace tandem
