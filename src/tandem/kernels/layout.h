#pragma once
// Copies that change a tensor's layout: permuting dimensions, slicing and
// concatenating along one dimension. Any dtype (bytes are moved, never
// converted); the results are contiguous.

#include <cstdint>
#include <span>
#include <vector>

#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

// y.dim(i) == x.dim(order[i]); order must be a permutation of 0..rank-1
// (ShapeError otherwise).
Tensor permute(const Tensor& x, std::span<const int> order);
// The inverse permutation of order: permute(permute(x, order), inverse) == x.
// Throws ShapeError unless order is a permutation of 0..size-1.
std::vector<int> inverse_permutation(std::span<const int> order);

// Elements [begin, end) of dimension axis. Throws ShapeError unless
// 0 <= begin <= end <= x.dim(axis).
Tensor slice(const Tensor& x, int axis, int64_t begin, int64_t end);
// The backward of slice: zeros of `shape` with dy at [begin, begin + dy.dim(axis))
// of dimension axis.
Tensor unslice(const Tensor& dy, const Shape& shape, int axis, int64_t begin);

// parts joined along axis; every part has the same rank, dtype and every
// other dimension (ShapeError naming the first that differs).
Tensor concat(std::span<const Tensor> parts, int axis);

// x repeated `size` times along a new dimension `axis` of the result (the
// backward of a sum along that axis; tf.repeat of an expanded dimension).
Tensor expand_axis(const Tensor& x, int axis, int64_t size);

// A negative axis counts from the end (-1: the last); throws ShapeError when
// it is out of range for rank.
int normalize_axis(int axis, int rank);

}  // namespace tandem::kernels
