#pragma once
// Private: attention's f32 causal products on AVX-512 (causal_products.h),
// where oneDNN 2.6 cannot skip the triangle at its fast kernel's speed.
// Register tiles of 8 rows by 32 (or 16) columns, each entry's products on
// one thread and each output a single f32 chain over k in order, so the
// result does not depend on the thread count.

#include <cstdint>

#include "tandem/kernels/detail/causal_products.h"

namespace tandem::kernels::detail {

// Whether causal_products_avx512 computes this product: AVX-512, f32
// operands and output, b batched like a, no activation, M a multiple of 8
// and N of 16.
bool causal_products_avx512_apply(const Tensor& a, const Tensor& out, const MatmulOptions& options,
                                  int64_t M, int64_t N, bool shared_b);

// out[i] = op(a[i]) op(b[i]) for the batch's i (operands checked by the
// caller), skipping the part's triangle: out_lower's columns past each
// block of 8 rows' diagonal tile are left unwritten.
void causal_products_avx512(const Tensor& a, const Tensor& b, Tensor& out,
                            const MatmulOptions& options, int64_t batch, int64_t M, int64_t K,
                            int64_t N, CausalPart part);

}  // namespace tandem::kernels::detail
