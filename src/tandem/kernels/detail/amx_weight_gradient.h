#pragma once
// Private: a^T b into f32 on the AMX tiles for bf16 a (K, M) and b (K, N)
// with a long K: a linear layer's weight gradient, dy^T x summed over every
// row of the batch. oneDNN 2.6 runs these with a transposed source at
// 530-620 GFLOP/s on an AMX Xeon where its other products reach 730-970,
// 43% of its time in gpt's bf16 step (docs/performance.md).
//
// K is taken in chunks of about 1 MiB of both operands: each chunk's rows
// of a are paired (rows 2j and 2j + 1 side by side, as the tiles' dot
// products take pairs) and transposed into tiles of 16 columns m by 16
// pairs, b's rows paired the same way; then every 2 x 2 block of output
// tiles runs over the chunk from L2, its accumulators loaded from and
// stored to out between chunks. With several threads, the wider operand's
// columns are split into one group per thread, each working through every
// chunk on its own (the narrower operand reformatted by each): sharing
// each chunk instead cost the team two waits per chunk and reads of tiles
// from the other core's cache (2 threads on gpt's layers: 1.33-1.52x
// faster split, kernels_bench).

#include "tandem/kernels/matmul.h"

namespace tandem::kernels::detail {

// Whether the product runs here: an AMX CPU (amx.h), a^T b (transpose_a
// only) of bf16 operands into a contiguous f32 out without bias or
// activation, M and N multiples of 16, K at least 256.
bool amx_weight_gradient_applies(const Tensor& a, const Tensor& bias, const Tensor& out,
                                 const MatmulOptions& options, int64_t M, int64_t K, int64_t N);

// out (M, N) = a^T b for a (K, M) and b (K, N), checked by the caller, and
// when column_sums (M, f32) is non-null, a's column sums (a layer's bias
// gradient, from the same reads of a). Products sum in f32 in the tiles,
// over K in order, each output tile on one thread; column sums in f32 over
// 32 rows and in double across them: neither depends on the thread count.
void amx_weight_gradient(const Tensor& a, const Tensor& b, Tensor& out, int64_t M, int64_t K,
                         int64_t N, Tensor* column_sums = nullptr);

}  // namespace tandem::kernels::detail
