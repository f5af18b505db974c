// The bf16 weight gradient (kernels/detail/bf16_conv_weights) on each
// engine this CPU runs (the AMX tiles, AVX512-BF16's dot products) against
// a double-precision sum over the same bf16 values, on shapes that reach
// each of its edges: a lone last image, padding, positions past a row,
// several chunks of image pairs (per slice of the batch on the dot
// products), groups of 1 to 4 accumulator tiles, a bias, stride 2's phases,
// strides, paddings and kernels that differ between rows and columns.
// Skipped on CPUs with neither (the op table's convolutions run oneDNN
// there).
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "support/gradcheck.h"
#include "support/reference.h"
#include "tandem/base/parallel.h"
#include "tandem/kernels/conv.h"
#include "tandem/kernels/detail/bf16_conv_weights.h"

namespace tandem {
namespace {

using kernels::detail::bf16_engine_name;
using kernels::detail::bf16_engines_here;
using kernels::detail::Bf16Engine;
using testing::random_tensor;
using testing::to_doubles;

struct Case {
  Shape x, w;
  kernels::Conv2dGeometry g;
};

kernels::Conv2dGeometry square(int64_t pad, int64_t stride = 1) {
  return {.stride_h = stride, .stride_w = stride, .pad_h = pad, .pad_w = pad};
}

// dw and db in double, and each dw's sum of |products| (the bound's scale).
struct Reference {
  std::vector<double> dw, magnitude, db;
};

Reference reference(const Tensor& x, const Tensor& dy, const Shape& w,
                    const kernels::Conv2dGeometry& geometry) {
  const std::vector<double> xs = to_doubles(x), ds = to_doubles(dy);
  const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3);
  const int64_t OH = dy.dim(1), OW = dy.dim(2), KH = w[0], KW = w[1], O = w[3];
  Reference r{std::vector<double>(w.numel()), std::vector<double>(w.numel()),
              std::vector<double>(O)};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t o = 0; o < O; ++o) {
          const double g = ds[((n * OH + oh) * OW + ow) * O + o];
          r.db[o] += g;
          for (int64_t kh = 0; kh < KH; ++kh)
            for (int64_t kw = 0; kw < KW; ++kw) {
              const int64_t h = oh * geometry.stride_h + kh - geometry.pad_h;
              const int64_t col = ow * geometry.stride_w + kw - geometry.pad_w;
              if (h < 0 || h >= H || col < 0 || col >= W) continue;
              for (int64_t c = 0; c < C; ++c) {
                const double p = xs[((n * H + h) * W + col) * C + c] * g;
                const int64_t at = ((kh * KW + kw) * C + c) * O + o;
                r.dw[at] += p;
                r.magnitude[at] += std::abs(p);
              }
            }
        }
  return r;
}

TEST(Bf16ConvWeights, MatchTheDoubleSumsOverTheSameBf16Values) {
  if (bf16_engines_here().empty()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
  const std::vector<Case> cases = {
      {Shape{3, 6, 5, 16}, Shape{3, 3, 16, 16}, square(1)},   // a lone third image, W = 5
      {Shape{2, 9, 7, 32}, Shape{3, 3, 32, 16}, square(1)},   // C > O: 18 accumulators per o block
      {Shape{2, 4, 4, 16}, Shape{3, 3, 16, 48}, square(0)},   // no padding, three o blocks
      {Shape{4, 3, 11, 16}, Shape{1, 1, 16, 32}, square(0)},  // 1x1
      {Shape{2, 5, 6, 32}, Shape{1, 1, 32, 16}, square(0)},   // a group of 2 tiles
      {Shape{2, 8, 8, 16}, Shape{5, 5, 16, 16}, square(2)},   // 25 taps
      {Shape{40, 28, 28, 16}, Shape{3, 3, 16, 16},
       square(1)},                                           // resnet's first stage, several chunks
      {Shape{5, 7, 7, 64}, Shape{3, 3, 64, 64}, square(1)},  // its last
      {Shape{3, 28, 28, 16}, Shape{3, 3, 16, 32}, square(1, 2)},  // stride 2: its downsampling
      {Shape{3, 28, 28, 16}, Shape{1, 1, 16, 32}, square(0, 2)},  // and its shortcut (one phase)
      {Shape{2, 7, 9, 32}, Shape{3, 3, 32, 16}, square(1, 2)},    // odd sizes
      {Shape{2, 8, 10, 16}, Shape{3, 3, 16, 16}, square(0, 2)},   // unpadded
      {Shape{2, 9, 9, 16}, Shape{2, 2, 16, 16}, square(0, 2)},    // an even kernel: two phases
      // Rows and columns apart: a tall kernel strided along rows and padded
      // only there, and a wide one strided along columns.
      {Shape{3, 9, 7, 16}, Shape{3, 1, 16, 16}, {.stride_h = 2, .pad_h = 1}},
      {Shape{3, 7, 9, 16}, Shape{1, 3, 16, 16}, {.stride_w = 2, .pad_w = 1}},
      // Images of 1 MiB a pair: chunks of 2 pairs, each of the dot products'
      // 8 slices of the batch over two of them (the last partial).
      {Shape{48, 64, 64, 16}, Shape{2, 1, 16, 16}, {.stride_h = 2, .pad_h = 1}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.x.to_string() + " " + c.w.to_string());
    const kernels::Conv2dGeometry& g = c.g;
    const Tensor x = random_tensor(c.x, -2, 2, 71).to(DType::bf16);
    const Tensor dy =
        random_tensor(kernels::conv2d_output_shape(c.x, c.w, g), -1, 1, 72).to(DType::bf16);
    ASSERT_TRUE(kernels::detail::bf16_conv_weights_applies(x, dy, c.w, g));
    Tensor public_dw = Tensor::empty(c.w);
    kernels::conv2d_backward_weights(x, dy, g, public_dw, nullptr);
    const Reference r = reference(x, dy, c.w, g);
    for (Bf16Engine engine : bf16_engines_here()) {
      SCOPED_TRACE(bf16_engine_name(engine));
      Tensor dw = Tensor::empty(c.w), db = Tensor::empty(Shape{c.w[3]});
      kernels::detail::bf16_conv_backward_weights(x, dy, g, dw, &db, engine);
      if (engine == kernels::detail::fastest_bf16_engine()) {
        EXPECT_EQ(dw.to_floats(), public_dw.to_floats()) << "the kernel takes the fastest engine";
      }
      const std::vector<double> got = to_doubles(dw), got_db = to_doubles(db);
      // f32 sums of exact bf16 products: a few units of f32 rounding per
      // sqrt(term) of the sum of magnitudes; an index error is of order 1.
      const double terms = static_cast<double>(dy.numel() / c.w[3]);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], r.dw[i], 4.0 * std::sqrt(terms) * 6e-8 * r.magnitude[i] + 1e-30) << i;
      }
      for (size_t o = 0; o < got_db.size(); ++o) ASSERT_NEAR(got_db[o], r.db[o], 1e-4) << o;
    }
  }
}

// What the kernels do not take goes to oneDNN: channels not in 16s,
// strides past 2, dilation, f32.
TEST(Bf16ConvWeights, AppliesOnlyWhereTheKernelsDo) {
  if (bf16_engines_here().empty()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
  const auto applies = [](const Shape& xs, const Shape& ws, const kernels::Conv2dGeometry& g,
                          DType dtype = DType::bf16) {
    const Tensor x = Tensor::zeros(xs, dtype);
    const Tensor dy = Tensor::zeros(kernels::conv2d_output_shape(xs, ws, g), dtype);
    return kernels::detail::bf16_conv_weights_applies(x, dy, ws, g);
  };
  EXPECT_TRUE(applies(Shape{2, 8, 8, 16}, Shape{3, 3, 16, 32}, square(1)));
  EXPECT_FALSE(applies(Shape{2, 8, 8, 24}, Shape{3, 3, 24, 32}, square(1)));
  EXPECT_FALSE(applies(Shape{2, 8, 8, 16}, Shape{3, 3, 16, 24}, square(1)));
  EXPECT_FALSE(applies(Shape{2, 9, 9, 16}, Shape{3, 3, 16, 16}, square(1, 3)));
  EXPECT_FALSE(applies(Shape{2, 9, 9, 16}, Shape{3, 3, 16, 16}, {.stride_w = 3}));
  EXPECT_FALSE(applies(Shape{2, 9, 9, 16}, Shape{3, 3, 16, 16}, {.dilation_h = 2}));
  EXPECT_FALSE(applies(Shape{2, 8, 8, 16}, Shape{3, 3, 16, 32}, square(1), DType::f32));
  EXPECT_FALSE(applies(Shape{0, 8, 8, 16}, Shape{3, 3, 16, 32}, square(1)));
}

// 1 to 4 threads give the same dw and db bits, on each engine: on the
// tiles the threads split a chunk's pairs and the groups of accumulator
// tiles between them, never a tile's order of sums (the first layer's 9
// tiles over several chunks, with a last image alone); the dot products'
// slices of the batch (5 and 8 here) go to the threads whole and are added
// in order (over two chunks each in the last case).
TEST(Bf16ConvWeights, TheThreadCountDoesNotChangeTheBits) {
  if (bf16_engines_here().empty()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
  const kernels::Conv2dGeometry g{.pad_h = 1, .pad_w = 1};
  for (const auto& [xs, ws] :
       std::vector<std::pair<Shape, Shape>>{{Shape{9, 14, 14, 32}, Shape{3, 3, 32, 32}},
                                            {Shape{41, 32, 32, 16}, Shape{3, 3, 16, 16}},
                                            {Shape{48, 64, 64, 16}, Shape{2, 1, 16, 16}}}) {
    const Tensor x = random_tensor(xs, -2, 2, 73).to(DType::bf16);
    const Tensor dy =
        random_tensor(kernels::conv2d_output_shape(xs, ws, g), -1, 1, 74).to(DType::bf16);
    for (Bf16Engine engine : bf16_engines_here()) {
      SCOPED_TRACE(xs.to_string() + " " + bf16_engine_name(engine));
      std::vector<float> by_threads[4];
      for (int threads = 1; threads <= 4; ++threads) {
        NumThreadsScope scope(threads);
        Tensor dw = Tensor::empty(ws), db = Tensor::empty(Shape{ws[3]});
        kernels::detail::bf16_conv_backward_weights(x, dy, g, dw, &db, engine);
        by_threads[threads - 1] = dw.to_floats();
        const std::vector<float> bias = db.to_floats();
        by_threads[threads - 1].insert(by_threads[threads - 1].end(), bias.begin(), bias.end());
      }
      for (int t = 1; t < 4; ++t) EXPECT_EQ(by_threads[0], by_threads[t]) << t + 1 << " threads";
    }
  }
}

}  // namespace
}  // namespace tandem
