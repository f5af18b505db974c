#pragma once
// Private: small batched bf16 products on the AMX tiles, attention's (per
// head 128 x 128 x 32 and its transposes). oneDNN 2.6 ran gpt's batches of
// 4 heads at about 390 GFLOP/s on an AMX Xeon, 11 us a call, 8% of its
// bf16 step (docs/performance.md). Each product is one batch entry's tiles
// in L1: a's rows loaded as they are (or transposed first, transpose_a), b
// put in the tiles' pair layout (rows of K in pairs), f32 accumulators.

#include <optional>

#include "tandem/kernels/detail/causal_products.h"
#include "tandem/kernels/matmul.h"

namespace tandem::kernels::detail {

// Whether batched_matmul(a, b) into out runs here: an AMX CPU (amx.h), bf16
// a and b with b batched like a, f32 or bf16 out, no activation, M and N
// multiples of 16 and K of 32, each at most 256.
bool amx_batched_matmul_applies(const Tensor& a, const Tensor& out, const MatmulOptions& options,
                                int64_t M, int64_t K, int64_t N, bool shared_b);

// out[i] = op(a[i]) op(b[i]) for the batch's i, as batched_matmul_into
// (operands checked by the caller). Sums in f32 in the tiles, each entry on
// one thread: the result does not depend on the thread count. With a
// causal part, the tiles its triangle holds are skipped (a's zeros are not
// summed; out_lower's tiles past the diagonal are left unwritten).
void amx_batched_matmul(const Tensor& a, const Tensor& b, Tensor& out, const MatmulOptions& options,
                        int64_t batch, int64_t M, int64_t K, int64_t N,
                        std::optional<CausalPart> part = std::nullopt);

}  // namespace tandem::kernels::detail
