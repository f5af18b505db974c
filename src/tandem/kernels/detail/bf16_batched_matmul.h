#pragma once
// Private: small batched bf16 products, attention's (per head 128 x 128 x
// 32 and its transposes), on tandem's bf16 engines (bf16_engine.h): the
// AMX tiles, or AVX512-BF16's dot products on CPUs without them. oneDNN
// 2.6 ran gpt's batches of 4 heads at about 390 GFLOP/s on an AMX Xeon, 11
// us a call, 8% of its bf16 step; on Zen 4 it ran them near the bf16 peak
// but computed the causal triangles' zeros, which these skip
// (docs/performance.md). Each product is one batch entry in L1: a's rows
// as they are (or transposed first, transpose_a), b in the pair layout
// (rows of K in pairs), f32 sums.

#include <optional>

#include "tandem/kernels/detail/bf16_engine.h"
#include "tandem/kernels/detail/causal_products.h"
#include "tandem/kernels/matmul.h"

namespace tandem::kernels::detail {

// Whether batched_matmul(a, b) into out runs here: a CPU with a bf16
// engine, bf16 a and b with b batched like a, f32 or bf16 out, no
// activation, M and N multiples of 16 and K of 32, each at most 256.
bool bf16_batched_matmul_applies(const Tensor& a, const Tensor& out, const MatmulOptions& options,
                                 int64_t M, int64_t K, int64_t N, bool shared_b);

// out[i] = op(a[i]) op(b[i]) for the batch's i, as batched_matmul_into
// (operands checked by the caller), on `engine` (one this CPU runs). Each
// entry on one thread: the result does not depend on the thread count.
// With a causal part, the blocks its triangle holds are skipped (a's zeros
// are not summed, so the skipped result has the whole product's bits for
// finite b, where 0 x inf would have made a NaN;
// out_lower's blocks past the diagonal are left unwritten).
void bf16_batched_matmul(const Tensor& a, const Tensor& b, Tensor& out,
                         const MatmulOptions& options, int64_t batch, int64_t M, int64_t K,
                         int64_t N, std::optional<CausalPart> part, Bf16Engine engine);

}  // namespace tandem::kernels::detail
