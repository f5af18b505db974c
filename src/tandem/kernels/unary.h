#pragma once
// Pointwise functions of one tensor for losses and models written by users
// (exp, log, sigmoid, tanh, reciprocal), computed in f32 for f32, bf16 and
// f16 storage; the result has x's dtype. CPU only for now: a GPU tensor is
// refused with the error every kernel without a CUDA version gives.

#include <string_view>

#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

enum class UnaryOp : uint8_t { exp, log, sigmoid, tanh, reciprocal };

std::string_view unary_op_name(UnaryOp op);

// y = op(x). log of 0 is -inf, of a negative number NaN, as in <cmath>.
Tensor unary(UnaryOp op, const Tensor& x);
// dx = dy * op'(x), from x and y = op(x) (whichever the derivative is
// cheaper from); dy, x and y have one shape; dx has dy's dtype.
Tensor unary_backward(UnaryOp op, const Tensor& dy, const Tensor& x, const Tensor& y);

}  // namespace tandem::kernels
