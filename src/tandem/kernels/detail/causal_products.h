#pragma once
// Private: attention's batched products under a causal mask, computing only
// the tiles the mask lets through. With T == S, query i sees keys j <= i,
// so each of the six products (q k^T, p v; and in the backward dout v^T,
// p^T dout, ds k, ds^T q) has a triangle of zeros or of unread values:
// with gpt's 128 positions, 28 of the 64 tiles of 16 x 16 in q k^T.
//
// The AMX tiles skip them in bf16 (amx_matmul.h), tandem's AVX-512 kernel
// in f32 (causal_products_avx512.h). oneDNN 2.6 computes the whole product
// elsewhere: blocks of rows as strided views (four calls per product) left
// its fast batched kernel (brgemm) for a slower one, and gpt's f32
// attention took 10% longer (docs/performance.md).

#include "tandem/kernels/matmul.h"

namespace tandem::kernels::detail {

// Which triangle of a square causal product may be skipped, for op(a) of
// (M, K), op(b) of (K, N) and out of (M, N).
enum class CausalPart {
  out_lower,  // only out(i, j) with j <= i is read (M == N); the rest may be left unwritten
  a_lower,    // op(a)(i, k) is zero for k > i (M == K)
  a_upper,    // op(a)(i, k) is zero for k < i (M == K)
};

// batched_matmul_into(a, b, out, options), skipping the part's triangle
// where the AMX tiles (bf16) or the AVX-512 kernel (f32) compute the
// product; elsewhere the whole product.
// Throws ShapeError as batched_matmul_into does, and when the product is
// not square where the part needs it. In matmul.cc.
void causal_batched_matmul(const Tensor& a, const Tensor& b, Tensor& out,
                           const MatmulOptions& options, CausalPart part);

}  // namespace tandem::kernels::detail
