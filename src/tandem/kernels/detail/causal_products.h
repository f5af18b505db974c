#pragma once
// Private: attention's batched products under a causal mask, computing only
// the tiles the mask lets through. With T == S, query i sees keys j <= i,
// so each of the six products (q k^T, p v; and in the backward dout v^T,
// p^T dout, ds k, ds^T q) has a triangle of zeros or of unread values:
// with gpt's 128 positions, 28 of the 64 tiles of 16 x 16 in q k^T.
//
// tandem's bf16 engines skip them in bf16 (bf16_batched_matmul.h: the AMX
// tiles, or AVX512-BF16's dot products), its AVX-512 kernel in f32
// (causal_products_avx512.h). oneDNN 2.6 computes the whole product
// elsewhere: blocks of rows as strided views (four calls per product) left
// its fast batched kernel (brgemm) for a slower one, and gpt's f32
// attention took 10% longer (docs/performance.md).

#include <algorithm>
#include <cstdint>
#include <optional>

#include "tandem/kernels/matmul.h"

namespace tandem::kernels::detail {

// Which triangle of a square causal product may be skipped, for op(a) of
// (M, K), op(b) of (K, N) and out of (M, N).
enum class CausalPart {
  out_lower,  // only out(i, j) with j <= i is read (M == N); the rest may be left unwritten
  a_lower,    // op(a)(i, k) is zero for k > i (M == K)
  a_upper,    // op(a)(i, k) is zero for k < i (M == K)
};

// The tiles a kernel computes for output rows [m, m + rows) of an (M, K) x
// (K, N) product: the sum over k in [k_begin, k_end) and columns [0,
// n_end), the bounds on the kernel's steps (k_step, n_step) and within K
// and N; all of it without a part. The AMX tiles, AVX512-BF16's dot
// products and the AVX-512 kernel take their blocks from here.
struct CausalTiles {
  int64_t k_begin, k_end, n_end;
};

inline CausalTiles causal_tiles(std::optional<CausalPart> part, int64_t m, int64_t rows, int64_t K,
                                int64_t N, int64_t k_step, int64_t n_step) {
  const auto up = [](int64_t v, int64_t step) { return (v + step - 1) / step * step; };
  if (!part) return {0, K, N};
  switch (*part) {
    case CausalPart::out_lower:
      return {0, K, std::min(N, up(m + rows, n_step))};
    case CausalPart::a_lower:
      return {0, std::min(K, up(m + rows, k_step)), N};
    case CausalPart::a_upper:
      return {std::min(K, m / k_step * k_step), K, N};
  }
  return {0, K, N};
}

// The FLOPs such a kernel does for one batch entry, in blocks of `rows`.
inline int64_t causal_flops(std::optional<CausalPart> part, int64_t M, int64_t K, int64_t N,
                            int64_t rows, int64_t k_step, int64_t n_step) {
  int64_t flops = 0;
  for (int64_t m = 0; m < M; m += rows) {
    const CausalTiles t = causal_tiles(part, m, rows, K, N, k_step, n_step);
    flops += 2 * rows * (t.k_end - t.k_begin) * t.n_end;
  }
  return flops;
}

// batched_matmul_into(a, b, out, options), skipping the part's triangle
// where tandem's bf16 engines (the AMX tiles, AVX512-BF16's dot products)
// or the AVX-512 kernel (f32) compute the product; elsewhere the whole
// product.
// Throws ShapeError as batched_matmul_into does, and when the product is
// not square where the part needs it. In matmul.cc.
void causal_batched_matmul(const Tensor& a, const Tensor& b, Tensor& out,
                           const MatmulOptions& options, CausalPart part);

}  // namespace tandem::kernels::detail
