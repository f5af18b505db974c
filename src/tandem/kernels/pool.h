#pragma once
// 2-D max pooling on oneDNN, channels-last: x (N, H, W, C) -> y (N, OH, OW, C).
// Forward in training mode also returns oneDNN's workspace (where each maximum
// came from), which the backward pass needs. f32, bf16.

#include <cstdint>

#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

struct Pool2dGeometry {
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
};

// (N, OH, OW, C); throws ShapeError when the window does not fit.
Shape pool2d_output_shape(const Shape& x, const Pool2dGeometry& geometry);

struct MaxPoolResult {
  Tensor y;
  Tensor workspace;  // undefined unless training
};

MaxPoolResult max_pool2d_forward(const Tensor& x, const Pool2dGeometry& geometry, bool training);

// dx (x_shape, dy's dtype): each dy routed to the position of its maximum.
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& workspace, const Shape& x_shape,
                           const Pool2dGeometry& geometry);

}  // namespace tandem::kernels
