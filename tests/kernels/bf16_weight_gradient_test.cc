// The bf16 weight gradient (kernels/detail/bf16_weight_gradient: a^T b over
// a long K) on each engine this CPU runs (the AMX tiles, AVX512-BF16's dot
// products) against double sums over the same bf16 values: K within one
// chunk and over several with a partial last one, odd counts of 16-column
// blocks, rows that leave a step half full. Skipped on CPUs with neither.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/gradcheck.h"
#include "support/reference.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/bf16_weight_gradient.h"
#include "tandem/kernels/matmul.h"

namespace tandem {
namespace {

using testing::random_tensor;
using testing::to_doubles;

using kernels::detail::bf16_engine_name;
using kernels::detail::bf16_engines_here;
using kernels::detail::Bf16Engine;

struct Case {
  int64_t M, K, N;
};

// out (M, N) against the double sums of a^T b, a (K, M) and b (K, N): f32
// sums of exact products, a few units of f32 rounding per sqrt(K) of the
// sum of magnitudes; an index error is of order 1.
void expect_near_double_sums(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t K = a.dim(0), M = a.dim(1), N = b.dim(1);
  const std::vector<double> av = to_doubles(a), bv = to_doubles(b), got = to_doubles(out);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double sum = 0.0, magnitude = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double x = av[k * M + m] * bv[k * N + n];
        sum += x;
        magnitude += std::abs(x);
      }
      const double bound = 8.0 * std::sqrt(static_cast<double>(K)) * 6e-8 * magnitude;
      ASSERT_NEAR(got[m * N + n], sum, bound + 1e-30) << m << " " << n;
    }
}

TEST(Bf16WeightGradient, MatchesTheDoubleSums) {
  if (bf16_engines_here().empty()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
  // Chunks are about 1 MiB of both operands: 384 rows at 1024 + 256
  // columns (1,000 rows: three chunks, the last partial), 1,920 at 256 + 16.
  const std::vector<Case> cases = {
      {16, 256, 16}, {48, 301, 80}, {32, 257, 48}, {1024, 1000, 256}, {256, 4100, 16}};
  uint64_t seed = 300;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.M << "x" << c.K << "x" << c.N);
    const Tensor a = random_tensor(Shape{c.K, c.M}, -2, 2, ++seed).to(DType::bf16);
    const Tensor b = random_tensor(Shape{c.K, c.N}, -2, 2, ++seed).to(DType::bf16);
    const kernels::MatmulOptions o{.transpose_a = true};
    Tensor product = Tensor::full(Shape{c.M, c.N}, 7.0f);  // every value written
    // The dot products are not taken where b is the wider (oneDNN is faster).
    const bool taken =
        kernels::detail::bf16_weight_gradient_applies(a, {}, product, o, c.M, c.K, c.N);
    ASSERT_EQ(taken, kernels::detail::fastest_bf16_engine() == Bf16Engine::tiles || c.M >= c.N);
    kernels::matmul_into(a, b, {}, product, o);
    for (Bf16Engine engine : bf16_engines_here()) {
      SCOPED_TRACE(bf16_engine_name(engine));
      Tensor out = Tensor::full(Shape{c.M, c.N}, 7.0f);
      kernels::detail::bf16_weight_gradient(a, b, out, c.M, c.K, c.N, nullptr, engine);
      if (taken && engine == kernels::detail::fastest_bf16_engine()) {
        EXPECT_EQ(out.to_floats(), product.to_floats()) << "matmul takes the fastest engine";
      }
      expect_near_double_sums(a, b, out);
    }
  }
}

// Only the shapes and options the kernels take: others go to oneDNN.
TEST(Bf16WeightGradient, AppliesOnlyWhereTheKernelsDo) {
  if (bf16_engines_here().empty()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
  const kernels::MatmulOptions weights{.transpose_a = true};
  const auto applies = [](int64_t M, int64_t K, int64_t N, const kernels::MatmulOptions& o,
                          DType dtype = DType::bf16, bool bias = false) {
    const Tensor a = Tensor::zeros(Shape{K, M}, dtype), out = Tensor::zeros(Shape{M, N});
    return kernels::detail::bf16_weight_gradient_applies(
        a, bias ? Tensor::zeros(Shape{N}) : Tensor(), out, o, M, K, N);
  };
  EXPECT_TRUE(applies(32, 256, 16, weights));
  EXPECT_FALSE(applies(24, 256, 16, weights));
  EXPECT_FALSE(applies(32, 256, 24, weights));
  EXPECT_FALSE(applies(32, 255, 16, weights));
  EXPECT_FALSE(applies(32, 256, 16, {}));
  EXPECT_FALSE(applies(32, 256, 16, {.transpose_a = true, .transpose_b = true}));
  EXPECT_FALSE(
      applies(32, 256, 16, {.transpose_a = true, .activation = kernels::Activation::relu}));
  EXPECT_FALSE(applies(32, 256, 16, weights, DType::f32));
  EXPECT_FALSE(applies(32, 256, 16, weights, DType::bf16, true));
}

// The linear layer's kernel: dw as above and db, dy's column sums, from the
// same reads, against double sums; and its checks.
TEST(Bf16WeightGradient, LinearBackwardWeightsSumsTheBiasGradient) {
  if (bf16_engines_here().empty()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
  for (const Case& c : std::vector<Case>{{1024, 1000, 256}, {48, 301, 32}}) {
    SCOPED_TRACE(::testing::Message() << c.M << "x" << c.K << "x" << c.N);
    const Tensor dy = random_tensor(Shape{c.K, c.M}, -2, 2, 320).to(DType::bf16);
    const Tensor x = random_tensor(Shape{c.K, c.N}, -2, 2, 321).to(DType::bf16);
    Tensor dw = Tensor::empty(Shape{c.M, c.N}), db = Tensor::full(Shape{c.M}, 7.0f);
    kernels::linear_backward_weights(dy, x, dw, &db);
    expect_near_double_sums(dy, x, dw);
    const std::vector<double> dys = to_doubles(dy), got = to_doubles(db);
    for (int64_t m = 0; m < c.M; ++m) {
      double sum = 0.0, magnitude = 0.0;
      for (int64_t k = 0; k < c.K; ++k) {
        sum += dys[k * c.M + m];
        magnitude += std::abs(dys[k * c.M + m]);
      }
      // f32 sums of 32 values, then double: one f32 rounding of each.
      ASSERT_NEAR(got[m], sum, 8 * 6e-8 * magnitude + 1e-30) << m;
    }
  }
  Tensor dw = Tensor::empty(Shape{16, 16}), wrong = Tensor::empty(Shape{15});
  const Tensor dy = Tensor::zeros(Shape{300, 16}, DType::bf16);
  EXPECT_THROW(kernels::linear_backward_weights(dy, dy, dw, &wrong), ShapeError);
  EXPECT_THROW(kernels::linear_backward_weights(dy, dy.slice(0, 299), dw, nullptr), ShapeError);
}

// 1 to 4 threads give the same dw and db bits: with more threads the
// wider operand's columns are split into groups that work through every
// chunk on their own (a's columns or b's, an odd count of 16-column
// blocks, several chunks), or the team shares each chunk (96 x 80 on the
// tiles, whose groups each reformat the narrower operand; 48 x 32 on
// either engine, too narrow for two groups of 32 columns), on each engine.
TEST(Bf16WeightGradient, TheThreadCountDoesNotChangeTheBits) {
  if (bf16_engines_here().empty()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
  for (const Case& c :
       std::vector<Case>{{96, 1000, 80}, {272, 5000, 64}, {48, 3000, 272}, {48, 3000, 32}}) {
    for (Bf16Engine engine : bf16_engines_here()) {
      SCOPED_TRACE(::testing::Message()
                   << c.M << "x" << c.K << "x" << c.N << " " << bf16_engine_name(engine));
      const Tensor dy = random_tensor(Shape{c.K, c.M}, -1, 1, 310).to(DType::bf16);
      const Tensor x = random_tensor(Shape{c.K, c.N}, -1, 1, 311).to(DType::bf16);
      std::vector<float> dw_by_threads[4], db_by_threads[4];
      for (int threads = 1; threads <= 4; ++threads) {
        NumThreadsScope scope(threads);
        Tensor dw = Tensor::full(Shape{c.M, c.N}, 7.0f), db = Tensor::full(Shape{c.M}, 7.0f);
        kernels::detail::bf16_weight_gradient(dy, x, dw, c.M, c.K, c.N, &db, engine);
        dw_by_threads[threads - 1] = dw.to_floats();
        db_by_threads[threads - 1] = db.to_floats();
      }
      for (int t = 1; t < 4; ++t) {
        EXPECT_EQ(dw_by_threads[0], dw_by_threads[t]) << t + 1 << " threads";
        EXPECT_EQ(db_by_threads[0], db_by_threads[t]) << t + 1 << " threads";
      }
    }
  }
}

}  // namespace
}  // namespace tandem
