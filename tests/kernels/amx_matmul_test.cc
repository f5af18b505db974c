// The AMX batched products (kernels/detail/amx_matmul) against double sums
// over the same bf16 values: each transpose, f32 and bf16 outputs, the
// sizes at the kernel's limits. Skipped on CPUs without AMX.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/gradcheck.h"
#include "support/reference.h"
#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/amx.h"
#include "tandem/kernels/detail/amx_matmul.h"
#include "tandem/kernels/matmul.h"

namespace tandem {
namespace {

using testing::random_tensor;
using testing::to_doubles;

struct Case {
  int64_t batch, M, K, N;
};

TEST(AmxMatmul, MatchesTheDoubleSumsForEachTransposeAndOutput) {
  if (!kernels::detail::has_amx_bf16()) GTEST_SKIP() << "no AMX tiles on this CPU";
  const std::vector<Case> cases = {
      {4, 128, 32, 128}, {4, 128, 128, 32}, {2, 48, 64, 80}, {1, 16, 256, 256}, {3, 256, 32, 16}};
  uint64_t seed = 80;
  for (const Case& c : cases) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        for (const DType out_dtype : {DType::f32, DType::bf16}) {
          SCOPED_TRACE(::testing::Message()
                       << c.batch << "x" << c.M << "x" << c.K << "x" << c.N << " ta " << ta
                       << " tb " << tb << " " << dtype_name(out_dtype));
          const Shape as = ta ? Shape{c.batch, c.K, c.M} : Shape{c.batch, c.M, c.K};
          const Shape bs = tb ? Shape{c.batch, c.N, c.K} : Shape{c.batch, c.K, c.N};
          const Tensor a = random_tensor(as, -2, 2, ++seed).to(DType::bf16);
          const Tensor b = random_tensor(bs, -2, 2, ++seed).to(DType::bf16);
          const kernels::MatmulOptions o{
              .transpose_a = ta, .transpose_b = tb, .out_dtype = out_dtype};
          Tensor out = Tensor::empty(Shape{c.batch, c.M, c.N}, out_dtype);
          ASSERT_TRUE(kernels::detail::amx_batched_matmul_applies(a, out, o, c.M, c.K, c.N, false));
          kernels::batched_matmul_into(a, b, out, o);
          const std::vector<double> av = to_doubles(a), bv = to_doubles(b), got = to_doubles(out);
          for (int64_t i = 0; i < c.batch; ++i)
            for (int64_t m = 0; m < c.M; ++m)
              for (int64_t n = 0; n < c.N; ++n) {
                double sum = 0.0, magnitude = 0.0;
                for (int64_t k = 0; k < c.K; ++k) {
                  const double x = av[i * c.M * c.K + (ta ? k * c.M + m : m * c.K + k)];
                  const double y = bv[i * c.K * c.N + (tb ? n * c.K + k : k * c.N + n)];
                  sum += x * y;
                  magnitude += std::abs(x * y);
                }
                // f32 sums of exact products; a bf16 output rounds once more.
                const double bound = 4.0 * std::sqrt(static_cast<double>(c.K)) * 6e-8 * magnitude +
                                     (out_dtype == DType::bf16 ? std::abs(sum) / 256.0 : 0.0);
                ASSERT_NEAR(got[(i * c.M + m) * c.N + n], sum, bound + 1e-30)
                    << i << " " << m << " " << n;
              }
        }
      }
    }
  }
}

TEST(AmxMatmul, TheThreadCountDoesNotChangeTheBits) {
  if (!kernels::detail::has_amx_bf16()) GTEST_SKIP() << "no AMX tiles on this CPU";
  const Tensor a = random_tensor(Shape{6, 128, 64}, -1, 1, 90).to(DType::bf16);
  const Tensor b = random_tensor(Shape{6, 128, 64}, -1, 1, 91).to(DType::bf16);
  std::vector<float> by_threads[2];
  for (int threads = 1; threads <= 2; ++threads) {
    NumThreadsScope scope(threads);
    by_threads[threads - 1] = kernels::batched_matmul(a, b, {.transpose_b = true}).to_floats();
  }
  EXPECT_EQ(by_threads[0], by_threads[1]);
}

}  // namespace
}  // namespace tandem
