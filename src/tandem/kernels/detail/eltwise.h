#pragma once
// Private: activations forward and backward on oneDNN's eltwise primitives,
// for the dtypes they take (f32, bf16); activation.cc falls back to its own
// loops for f16.

#include "tandem/kernels/activation.h"
#include "tandem/tensor/tensor.h"

namespace tandem::kernels::detail {

bool eltwise_supported(const Tensor& x);
// y = activation(x); activation is not none.
Tensor eltwise_forward(Activation activation, const Tensor& x);
// dx from dy and the activation's input x (same shape and dtype).
Tensor eltwise_backward(Activation activation, const Tensor& dy, const Tensor& x);

}  // namespace tandem::kernels::detail
