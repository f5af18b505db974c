#pragma once
// Scaled dot-product attention, fused: softmax(q k^T * scale + mask) v with
// an optional causal mask and dropout on the attention probabilities. Only
// the output and each row's log-sum-exp are kept for backward, which
// recomputes the probabilities (FlashAttention's trade: O(T) memory per row
// instead of the T x S probabilities of every head). The scores of a group
// of heads are built in a scratch buffer of bounded size at a time (on
// AVX-512 CPUs at least a head per thread), by batched products that skip the
// blocks a causal mask hides (detail/causal_products.h: tandem's AMX,
// AVX512-BF16 and AVX-512 kernels where they apply, oneDNN's otherwise).
// Legend: B batch, H heads, T query positions, S key positions, D head
// width.

#include <cstdint>

#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

struct AttentionOptions {
  bool causal = true;    // query i sees keys j <= i (PyTorch's is_causal)
  float dropout = 0.0f;  // on the probabilities, in [0, 1)
  // The dropout mask: probability (i, j) of head h (flattened over B and H) is
  // kept when random_bits_at(seed, offset + (h * T + i) * S + j) / 2^32 >= p.
  uint64_t seed = 0, offset = 0;
  float scale = 0.0f;  // 0: 1 / sqrt(D)
};

struct AttentionResult {
  Tensor out;  // (B, H, T, D), q's dtype
  Tensor lse;  // (B, H, T) f32: log-sum-exp of each row's scaled scores
};

// q (B, H, T, D), k and v (B, H, S, D), all f32 or all bf16 (then the
// matmuls run in bf16 with f32 accumulation and the softmax in f32).
// Throws ShapeError for shapes, dtypes or devices that do not fit (heads
// of no width included), InvalidArgument for a dropout outside [0, 1) or a
// scale that is negative or not finite.
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& options = {});

struct AttentionGrads {
  Tensor dq, dk, dv;  // the shapes and dtype of q, k, v
};

// dout (B, H, T, D) in q's dtype; out and lse from attention() with the
// same options.
AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  const AttentionOptions& options = {});
// As above, writing into grads' tensors, which must have the shapes and
// dtype of q, k, v on their device (views of one packed gradient, say: no
// copy to join them after). Throws ShapeError otherwise.
void attention_backward_into(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, const AttentionOptions& options,
                             AttentionGrads& grads);

// Self-attention on q, k, v interleaved per position, as a fused QKV
// projection writes them: qkv (B, T, 3, H, D), q then k then v at each
// position. Returns out (B, T, H, D), which a projection reads as (B, T,
// H * D), and lse (B, H, T): the values of attention() on the permuted
// thirds, without the permutes' copies (on the CPU each group of heads is
// gathered into a cache-sized scratch and its output scattered back; other
// devices permute).
AttentionResult attention_interleaved(const Tensor& qkv, const AttentionOptions& options = {});
// dout (B, T, H, D); out and lse from attention_interleaved with the same
// options. Returns the gradient of qkv, (B, T, 3, H, D).
Tensor attention_interleaved_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                      const Tensor& lse, const AttentionOptions& options = {});

// The number of T x S f32 score matrices that fit attention's scratch on
// `device` (512 KiB of them on the CPU, 256 MiB on a GPU), at least one;
// attention() takes at least a head per thread on AVX-512 CPUs, and
// attention_interleaved hands such groups to the threads whole.
int64_t attention_heads_per_group(int64_t heads, int64_t T, int64_t S,
                                  Device device = cpu_device());

}  // namespace tandem::kernels
