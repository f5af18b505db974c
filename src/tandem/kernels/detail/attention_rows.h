#pragma once
// The row-wise parts of attention (kernels/attention.cc), between its
// batched products: the masked softmax of the scores, and in backward the
// gradient of the scores. Each has a CPU and a CUDA implementation; the
// products run on detail::causal_batched_matmul (causal_products.h) on
// either device.

#include <cstdint>

#include "tandem/kernels/attention.h"
#include "tandem/tensor/tensor.h"

namespace tandem::kernels::detail {

// Throws InvalidArgument for a dropout outside [0, 1) or a negative or
// non-finite scale.
void check_attention_options(const AttentionOptions& options);

// What the row-wise parts need of the shapes and options.
struct AttentionRows {
  int64_t T = 0, S = 0;  // query rows and keys per head
  float scale = 1.0f;    // applied to the raw scores q . k
  bool causal = true;
  // Dropout on the probabilities: (h, i, j) of global head h is kept when
  // random_bits_at(seed, offset + (h * T + i) * S + j) >= threshold.
  bool dropout = false;
  uint64_t seed = 0, offset = 0, threshold = 0;
  float keep_scale = 1.0f;

  AttentionRows(const AttentionOptions& options, int64_t T, int64_t S, int64_t D);
  // What probability (h, i, j) is multiplied by: 0 or 1 / (1 - p).
  float dropout_factor(int64_t h, int64_t i, int64_t j) const;
};

// scores (count, T, S) f32 holds q . k of global heads [first, first +
// count); probs (same shape, q's dtype; may be scores itself) receives the
// probabilities (masked, dropout applied), and each row's log-sum-exp of
// the scaled scores is written to lse (B, H, T) f32. Writing probs in q's
// dtype in the same pass saves the device a conversion pass over scores.
void attention_probabilities(const AttentionRows& rows, int64_t first, Tensor& scores, Tensor& lse,
                             Tensor& probs);
// D_i = dout_i . out_i for every row of (B, H, T, D): (B * H * T,) f32.
Tensor attention_row_dot(const Tensor& dout, const Tensor& out);

// probs (count, T, S) f32 holds q . k again and dprobs dout . v^T (both
// may be overwritten); `kept` receives the kept probabilities (after
// dropout) and `dscores` the gradient of the raw scores, dS = P (dP - D)
// scale, both in q's dtype. Without dropout in f32, kept may be probs and
// dscores dprobs: the work is then in place.
void attention_score_grads(const AttentionRows& rows, int64_t first, Tensor& probs, Tensor& dprobs,
                           const Tensor& lse, const Tensor& row_dot, Tensor& kept, Tensor& dscores);

// One group of heads, [first, first + count) of the call's B * H, each
// operand (count, X, D): the products and row parts of attention() (out
// written, lse's rows of the group filled) and of attention_backward()
// (grads' three tensors written; row_dot covers every head of the call).
void attention_group(const AttentionRows& rows, int64_t first, const Tensor& q, const Tensor& k,
                     const Tensor& v, Tensor& lse, Tensor& out);
void attention_backward_group(const AttentionRows& rows, int64_t first, const Tensor& q,
                              const Tensor& k, const Tensor& v, const Tensor& dout,
                              const Tensor& lse, const Tensor& row_dot, AttentionGrads& grads);

}  // namespace tandem::kernels::detail
