// The small batched bf16 products (kernels/detail/bf16_batched_matmul) on
// each engine this CPU runs (the AMX tiles, AVX512-BF16's dot products)
// against double sums over the same bf16 values: each transpose, f32 and
// bf16 outputs, the sizes at the kernel's limits, and each causal part,
// whose skipped blocks must leave the whole product's bits. Skipped on CPUs
// with neither engine.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "support/gradcheck.h"
#include "support/reference.h"
#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/bf16_batched_matmul.h"
#include "tandem/kernels/matmul.h"

namespace tandem {
namespace {

using kernels::detail::bf16_engine_name;
using kernels::detail::bf16_engines_here;
using kernels::detail::Bf16Engine;
using kernels::detail::CausalPart;
using testing::expect_batched_product_near_double_sums;
using testing::lower_triangle;
using testing::random_tensor;

struct Case {
  int64_t batch, M, K, N;
};

// op(a) op(b) on the engine, into a new (batch, M, N) tensor.
Tensor product(const Tensor& a, const Tensor& b, const Case& c, const kernels::MatmulOptions& o,
               std::optional<CausalPart> part, Bf16Engine engine) {
  Tensor out = Tensor::empty(Shape{c.batch, c.M, c.N}, o.out_dtype);
  if (part == CausalPart::out_lower) out.zero();  // the skipped blocks stay unwritten
  kernels::detail::bf16_batched_matmul(a, b, out, o, c.batch, c.M, c.K, c.N, part, engine);
  return out;
}

TEST(Bf16BatchedMatmul, MatchesTheDoubleSumsForEachTransposeAndOutput) {
  if (bf16_engines_here().empty()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
  const std::vector<Case> cases = {
      {4, 128, 32, 128}, {4, 128, 128, 32}, {2, 48, 64, 80}, {1, 16, 256, 256}, {3, 256, 32, 16}};
  uint64_t seed = 80;
  for (const Bf16Engine engine : bf16_engines_here()) {
    for (const Case& c : cases) {
      for (const bool ta : {false, true}) {
        for (const bool tb : {false, true}) {
          for (const DType out_dtype : {DType::f32, DType::bf16}) {
            SCOPED_TRACE(::testing::Message() << bf16_engine_name(engine) << " " << c.batch << "x"
                                              << c.M << "x" << c.K << "x" << c.N << " ta " << ta
                                              << " tb " << tb << " " << dtype_name(out_dtype));
            const Shape as = ta ? Shape{c.batch, c.K, c.M} : Shape{c.batch, c.M, c.K};
            const Shape bs = tb ? Shape{c.batch, c.N, c.K} : Shape{c.batch, c.K, c.N};
            const Tensor a = random_tensor(as, -2, 2, ++seed).to(DType::bf16);
            const Tensor b = random_tensor(bs, -2, 2, ++seed).to(DType::bf16);
            const kernels::MatmulOptions o{
                .transpose_a = ta, .transpose_b = tb, .out_dtype = out_dtype};
            Tensor out = Tensor::empty(Shape{c.batch, c.M, c.N}, out_dtype);
            ASSERT_TRUE(
                kernels::detail::bf16_batched_matmul_applies(a, out, o, c.M, c.K, c.N, false));
            out = product(a, b, c, o, std::nullopt, engine);
            expect_batched_product_near_double_sums(a, b, out, ta, tb,
                                                    [&](int64_t) { return c.N; });
          }
        }
      }
    }
  }
}

TEST(Bf16BatchedMatmul, CausalPartsSkipOnlyZerosAndUnreadBlocks) {
  if (bf16_engines_here().empty()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
  struct Part {
    CausalPart part;
    bool ta, tb;
  };
  const Part parts[] = {{CausalPart::out_lower, false, true},
                        {CausalPart::a_lower, false, false},
                        {CausalPart::a_upper, true, false}};
  uint64_t seed = 500;
  for (const Bf16Engine engine : bf16_engines_here()) {
    for (const Part& p : parts) {
      for (const auto& [T, D] : {std::pair<int64_t, int64_t>{128, 32}, {64, 64}, {96, 96}}) {
        for (const DType out_dtype : {DType::f32, DType::bf16}) {
          SCOPED_TRACE(::testing::Message()
                       << bf16_engine_name(engine) << " part " << static_cast<int>(p.part) << " T "
                       << T << " D " << D << " " << dtype_name(out_dtype));
          const bool scores = p.part == CausalPart::out_lower;
          const Case c{3, T, scores ? D : T, scores ? T : D};
          const Tensor a = scores ? random_tensor(Shape{3, T, D}, -2, 2, ++seed).to(DType::bf16)
                                  : lower_triangle(3, T, DType::bf16, ++seed);
          const Tensor b = random_tensor(Shape{3, T, D}, -2, 2, ++seed).to(DType::bf16);
          const kernels::MatmulOptions o{
              .transpose_a = p.ta, .transpose_b = p.tb, .out_dtype = out_dtype};
          const Tensor out_like = Tensor::empty(Shape{1}, out_dtype);
          ASSERT_TRUE(
              kernels::detail::bf16_batched_matmul_applies(a, out_like, o, c.M, c.K, c.N, false));
          const Tensor skipped = product(a, b, c, o, p.part, engine);
          const auto limit = [&](int64_t m) { return scores ? m + 1 : c.N; };
          expect_batched_product_near_double_sums(a, b, skipped, p.ta, p.tb, limit);
          const std::vector<float> whole = product(a, b, c, o, std::nullopt, engine).to_floats();
          const std::vector<float> got = skipped.to_floats();
          for (int64_t i = 0; i < c.batch; ++i)
            for (int64_t m = 0; m < c.M; ++m)
              for (int64_t n = 0; n < limit(m); ++n) {
                const auto at = static_cast<size_t>((i * c.M + m) * c.N + n);
                ASSERT_EQ(got[at], whole[at]) << i << " " << m << " " << n;
              }
        }
      }
    }
  }
}

TEST(Bf16BatchedMatmul, TheThreadCountDoesNotChangeTheBits) {
  if (bf16_engines_here().empty()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
  const Tensor a = random_tensor(Shape{6, 128, 64}, -1, 1, 90).to(DType::bf16);
  const Tensor b = random_tensor(Shape{6, 128, 64}, -1, 1, 91).to(DType::bf16);
  const Case c{6, 128, 64, 128};
  const kernels::MatmulOptions o{.transpose_b = true, .out_dtype = DType::f32};
  for (const Bf16Engine engine : bf16_engines_here()) {
    SCOPED_TRACE(bf16_engine_name(engine));
    std::vector<float> by_threads[3];
    for (int threads = 1; threads <= 3; ++threads) {
      NumThreadsScope scope(threads);
      by_threads[threads - 1] = product(a, b, c, o, std::nullopt, engine).to_floats();
    }
    EXPECT_EQ(by_threads[0], by_threads[1]);
    EXPECT_EQ(by_threads[0], by_threads[2]);
  }
}

}  // namespace
}  // namespace tandem
