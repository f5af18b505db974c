#pragma once
// Private: attention's row-wise parts (attention_rows.h) on AVX-512, for
// CPUs that have it. Each call covers a range
// of rows (no call per row: gpt's causal rows average 64 keys), and the
// probabilities and score gradients are written in q's dtype in the same
// pass that computes them (no f32 copy converted after). Only the shapes
// attention.cc passes: scores, probs, kept and dscores (count, T, S); lse
// and row_dot f32.

#include "tandem/kernels/detail/attention_rows.h"

namespace tandem::kernels::detail {

// Whether the functions below serve this CPU: it has AVX-512.
bool attention_rows_avx512_apply();

void attention_probabilities_avx512(const AttentionRows& rows, int64_t first, Tensor& scores,
                                    Tensor& lse, Tensor& probs);
void attention_score_grads_avx512(const AttentionRows& rows, int64_t first, Tensor& probs,
                                  Tensor& dprobs, const Tensor& lse, const Tensor& row_dot,
                                  Tensor& kept, Tensor& dscores);
// attention_row_dot for f32 or bf16 dout and out on an AVX-512 CPU (the
// products summed in double, as the portable loop does).
Tensor attention_row_dot_avx512(const Tensor& dout, const Tensor& out);

}  // namespace tandem::kernels::detail
