#pragma once
// Reductions, accumulated in double and combined in a fixed order so that the
// result does not depend on the thread count. Outputs are f32.

#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

// Sum of all elements, shape () f32.
Tensor sum(const Tensor& x);
// Mean of all elements, shape () f32; 0 elements give NaN, as in PyTorch.
Tensor mean(const Tensor& x);
// Sum of the squares of all elements (f32, bf16 or f16), accumulated in
// double block by block: a squared L2 norm (gradient norms, the noise scale).
double squared_norm(const Tensor& x);
// Sums x over its leading dimensions down to `target`, which must be x's
// trailing dimensions (the backward of a broadcast). Output f32 of shape target.
Tensor sum_to_shape(const Tensor& x, const Shape& target);
// Sums x (f32, bf16 or f16) along one axis (negative counts from the end),
// in double and in index order: f32 of x's shape without that axis.
Tensor sum_axis(const Tensor& x, int axis);

}  // namespace tandem::kernels
