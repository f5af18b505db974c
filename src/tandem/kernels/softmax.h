#pragma once
// Softmax and log-softmax over the last dimension, forward and backward, for
// f32, bf16 and f16 tensors (computed in f32; outputs in the input's dtype).

#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

// y = exp(x - max) / sum(exp(x - max)) along the last dimension.
Tensor softmax(const Tensor& x);
// dx = y * (dy - sum(dy * y)) along the last dimension (y: softmax's output).
Tensor softmax_backward(const Tensor& dy, const Tensor& y);
// y = x - max - log(sum(exp(x - max))).
Tensor log_softmax(const Tensor& x);
// dx = dy - exp(y) * sum(dy) (y: log_softmax's output).
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y);

}  // namespace tandem::kernels
