#pragma once
// Pointwise arithmetic for f32, bf16 and f16 tensors (computed in f32).
// Broadcasting: b may have a's shape, a's trailing dimensions (repeated over
// the leading ones, e.g. a bias row), or a single element.

#include <vector>

#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

// out = a + b (out has a's shape and dtype; b must have a's dtype).
Tensor add(const Tensor& a, const Tensor& b);
// out = max(a + b, 0) for a and b of one shape and dtype: a residual add
// and the ReLU after it in one pass, with relu(add(a, b))'s bits (a NaN
// gives +0, as relu). Throws ShapeError for operands that differ.
Tensor add_relu(const Tensor& a, const Tensor& b);
// out = a * b, same broadcasting as add.
Tensor mul(const Tensor& a, const Tensor& b);
// out = a * factor.
Tensor scale(const Tensor& a, float factor);
// dst += alpha * src; same element count; dtypes may differ (src converted).
void add_into(Tensor& dst, const Tensor& src, float alpha = 1.0f);
// Multiplies every f32 tensor in place by factor and says whether all the
// results are finite (the loss scaler's unscale-and-check, one pass). On a
// GPU the answer is one flag for all the tensors, read back once.
bool scale_and_check_finite(const std::vector<Tensor>& tensors, float factor);

// True when b broadcasts onto a under the rules above.
bool broadcastable(const Shape& a, const Shape& b);

}  // namespace tandem::kernels
