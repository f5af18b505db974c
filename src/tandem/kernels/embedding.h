#pragma once
// Embedding lookup: rows of a (V, D) table gathered by i32 indices.

#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

// weight (V, D) floating, indices i32 of any shape S -> (S..., D) in weight's
// dtype. Throws InvalidArgument naming the first index outside [0, V).
Tensor embedding(const Tensor& weight, const Tensor& indices);

// d weight (V, D) f32: each row of dy added to the row its index names.
Tensor embedding_backward(const Tensor& dy, const Tensor& indices, int64_t vocabulary);

}  // namespace tandem::kernels
