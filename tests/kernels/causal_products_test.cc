// Attention's causal products (kernels/detail/causal_products) against
// double sums over the same values, for each causal part, f32 and bf16: on
// tandem's fastest bf16 engine where the CPU has one (bf16, sizes multiples
// of 16; bf16_batched_matmul_test runs every engine), on AVX-512 (f32, rows
// a multiple of 8 and columns of 16), the whole product elsewhere.
#include <gtest/gtest.h>

#include <vector>

#include "support/gradcheck.h"
#include "support/reference.h"
#include "tandem/base/error.h"
#include "tandem/kernels/detail/causal_products.h"

namespace tandem {
namespace {

using kernels::detail::CausalPart;
using testing::expect_batched_product_near_double_sums;
using testing::lower_triangle;
using testing::random_tensor;
using testing::to_doubles;

struct Product {
  CausalPart part;
  kernels::MatmulOptions options;
  const char* name;
};

TEST(CausalProducts, MatchTheDoubleSumsWhereTheMaskLetsThrough) {
  const Product products[] = {
      {CausalPart::out_lower, {.transpose_b = true}, "q k^T"},
      {CausalPart::a_lower, {}, "p v"},
      {CausalPart::a_upper, {.transpose_a = true}, "p^T dout"},
  };
  // gpt's heads, AMX tile multiples, heads narrower than a vector or not
  // a whole number of them (the f32 kernel's transposed tails), and sizes
  // only oneDNN takes.
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{128, 32}, {48, 64}, {48, 24},
                                                          {64, 8},   {40, 24}, {7, 5}};
  uint64_t seed = 300;
  for (const Product& p : products) {
    for (const auto& [T, D] : sizes) {
      for (const DType dtype : {DType::f32, DType::bf16}) {
        for (const DType out_dtype : {DType::f32, DType::bf16}) {
          if (dtype == DType::f32 && out_dtype == DType::bf16) continue;
          SCOPED_TRACE(::testing::Message()
                       << p.name << " T " << T << " D " << D << " " << dtype_name(dtype) << " into "
                       << dtype_name(out_dtype));
          const int64_t batch = 3;
          const bool scores = p.part == CausalPart::out_lower;
          const Tensor a = scores ? random_tensor(Shape{batch, T, D}, -2, 2, ++seed).to(dtype)
                                  : lower_triangle(batch, T, dtype, ++seed);
          const Tensor b = random_tensor(Shape{batch, T, D}, -2, 2, ++seed).to(dtype);
          const int64_t N = scores ? T : D;
          Tensor out = Tensor::empty(Shape{batch, T, N}, out_dtype);
          kernels::MatmulOptions options = p.options;
          options.out_dtype = out_dtype;
          kernels::detail::causal_batched_matmul(a, b, out, options, p.part);
          const auto columns = [&](int64_t m) { return scores ? m + 1 : N; };
          expect_batched_product_near_double_sums(a, b, out, options.transpose_a,
                                                  options.transpose_b, columns);
          // On the bf16 engines the skipped blocks only ever added zeros:
          // the whole product's values, bit for bit. (The f32 kernel sums in
          // its own order: against the double sums only.)
          if (dtype != DType::bf16) continue;
          const std::vector<double> got = to_doubles(out);
          const std::vector<double> whole = to_doubles(kernels::batched_matmul(a, b, options));
          for (int64_t i = 0; i < batch; ++i)
            for (int64_t m = 0; m < T; ++m)
              for (int64_t n = 0; n < columns(m); ++n) {
                const int64_t at = (i * T + m) * N + n;
                ASSERT_EQ(got[at], whole[at]) << i << " " << m << " " << n;
              }
        }
      }
    }
  }
}

TEST(CausalProducts, RefuseProductsThatAreNotSquareWhereTheTriangleLies) {
  const Tensor a = Tensor::zeros(Shape{2, 16, 8}), b = Tensor::zeros(Shape{2, 8, 32});
  Tensor out = Tensor::zeros(Shape{2, 16, 32});
  EXPECT_THROW(kernels::detail::causal_batched_matmul(a, b, out, {}, CausalPart::out_lower),
               ShapeError);
  EXPECT_THROW(kernels::detail::causal_batched_matmul(a, b, out, {}, CausalPart::a_lower),
               ShapeError);
}

}  // namespace
}  // namespace tandem
