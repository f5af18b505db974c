#pragma once
// Private: layer norm's rows on AVX-512 for f32 or bf16 storage with C a
// multiple of 16, which normalization.cc's layer_norm and its backward use
// where they apply. GCC leaves the portable loops over bf16 scalar: gpt's
// layer norms (width 256) took 8% of its bf16 step on an AMX Xeon. The
// portable rows' method (two-pass statistics in float), not their bits:
// lanes reduced as a tree, 1/C multiplied, fused multiply-adds (results
// differ in the last bits under TANDEM_MAX_CPU_ISA=avx2); the backward
// computes dx and the rows' shares of dgamma and dbeta in one pass, summed
// as the portable rows' (row_blocks.h's reduce_rows).

#include <cstdint>
#include <vector>

#include "tandem/kernels/normalization.h"
#include "tandem/tensor/tensor.h"

namespace tandem::kernels::detail {

bool layer_norm_rows_apply(const Tensor& x);

// x (R, C) as rows; result's y, mean and rstd allocated by the caller.
void layer_norm_rows(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                     NormResult& result);
// Writes dx (allocated by the caller); returns dgamma's sums in [0, C) and
// dbeta's in [C, 2C).
std::vector<double> layer_norm_backward_rows(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                             const Tensor& rstd, const Tensor& gamma, Tensor& dx);

}  // namespace tandem::kernels::detail
