#pragma once
// Pointwise activations: ReLU, GELU (the erf form, PyTorch's default, and the
// tanh approximation, GPT-2's), SiLU (x * sigmoid(x), also called swish),
// forward and backward, for f32, bf16 and f16 tensors (computed in f32).

#include <string_view>

#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

// Activation fused into the epilogue of matmul/conv, or applied on its own.
enum class Activation : uint8_t { none, relu, gelu, gelu_tanh, silu };

std::string_view activation_name(Activation activation);
// "none", "relu", "gelu", "gelu_tanh", "silu"; throws InvalidArgument otherwise.
Activation parse_activation(std::string_view name);

// y = max(x, 0). Output has x's shape and dtype.
Tensor relu(const Tensor& x);
// dx = dy where y > 0, else 0 (y is relu's output; y > 0 exactly where x > 0).
Tensor relu_backward(const Tensor& dy, const Tensor& y);

// y = x * Phi(x) with Phi the standard normal CDF.
Tensor gelu(const Tensor& x);
// dx = dy * (Phi(x) + x * phi(x)).
Tensor gelu_backward(const Tensor& dy, const Tensor& x);

// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (PyTorch's
// gelu(approximate="tanh")).
Tensor gelu_tanh(const Tensor& x);
Tensor gelu_tanh_backward(const Tensor& dy, const Tensor& x);
// y = x / (1 + exp(-x)).
Tensor silu(const Tensor& x);
Tensor silu_backward(const Tensor& dy, const Tensor& x);
// y = activation(x), any activation (none returns x itself).
Tensor activate(Activation activation, const Tensor& x);
// dx for a fused activation given the activation's output y (relu) or, for
// the others, its input. none returns dy itself.
Tensor activation_backward(Activation activation, const Tensor& dy, const Tensor& saved);

}  // namespace tandem::kernels
