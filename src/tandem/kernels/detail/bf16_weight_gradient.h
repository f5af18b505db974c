#pragma once
// Private: a^T b into f32 on tandem's bf16 engines (bf16_engine.h) for bf16
// a (K, M) and b (K, N) with a long K: a linear layer's weight gradient,
// dy^T x summed over every row of the batch. oneDNN 2.6 runs these with a
// transposed source at 530-620 GFLOP/s on an AMX Xeon where its other
// products reach 730-970, 43% of its time in gpt's bf16 step, and at
// 183-205 GFLOP/s on Zen 4's AVX512-BF16 (docs/performance.md).
//
// K is taken in chunks of about 1 MiB of both operands: each chunk's rows
// of a are paired (rows 2j and 2j + 1 side by side, as both engines take
// pairs) and, for the tiles, transposed into tiles of 16 columns m by 16
// pairs, b's rows paired the same way; then every block of outputs runs
// over the chunk from L2 (2 x 2 tiles, or 8 rows m by 48 columns n of dot
// products: each pair of a broadcast against a row of b's pairs), its
// accumulators loaded from and stored to out between chunks. With several
// threads, the wider operand's columns are split into groups (up to one
// per thread, of at least 32 columns; on the tiles fewer where each
// group's copy of the narrower operand would cost too much), each working
// through every chunk on its own: sharing each chunk instead cost the team
// two waits per chunk and reads of tiles from the other core's cache (2
// threads on gpt's layers: 1.33-1.52x faster split, kernels_bench).

#include "tandem/kernels/detail/bf16_engine.h"
#include "tandem/kernels/matmul.h"

namespace tandem::kernels::detail {

// Whether the product runs here: a CPU with a bf16 engine, a^T b
// (transpose_a only) of bf16 operands into a contiguous f32 out without
// bias or activation, M and N multiples of 16, K at least 256; on the dot
// products (no AMX) only where M >= N (oneDNN was faster otherwise).
bool bf16_weight_gradient_applies(const Tensor& a, const Tensor& bias, const Tensor& out,
                                  const MatmulOptions& options, int64_t M, int64_t K, int64_t N);

// out (M, N) = a^T b for a (K, M) and b (K, N), checked by the caller, on
// `engine` (one the CPU runs), and when column_sums (M, f32) is non-null,
// a's column sums (a layer's bias gradient, from the same reads of a).
// Products sum in f32 over K in order, each output on one thread; column
// sums in f32 over 32 rows and in double across them: neither depends on
// the thread count.
void bf16_weight_gradient(const Tensor& a, const Tensor& b, Tensor& out, int64_t M, int64_t K,
                          int64_t N, Tensor* column_sums, Bf16Engine engine);

}  // namespace tandem::kernels::detail
