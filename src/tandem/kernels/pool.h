#pragma once
// 2-D pooling, channels-last: x (N, H, W, C) -> y (N, OH, OW, C).
// Max pooling takes f32, bf16 and f16; forward in training mode also
// returns a workspace (where each maximum came from: its position in the
// window, u8 for windows of up to 255 positions, i32 beyond, and the GPU's
// own layout on a GPU), which the backward pass needs. Average pooling
// (avg_pool.cc) handles f32, bf16 and f16, accumulating in f32.

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

// With relu, y = max(maximum, 0) as relu(max_pool2d_forward(x)) gives it
// (a NaN maximum gives +0), and a window whose maximum the ReLU zeroed has
// no position in the workspace, so max_pool2d_backward routes nothing from
// it: relu's backward folded in, with the composition's bits. The fused
// ReLU runs on the CPU only (InvalidArgument elsewhere).
MaxPoolResult max_pool2d_forward(const Tensor& x, const Pool2dGeometry& geometry, bool training,
                                 bool relu = false);

// dx (x_shape, dy's dtype): each dy routed to the position of its maximum.
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& workspace, const Shape& x_shape,
                           const Pool2dGeometry& geometry);

// Average over each window, padding counted as zeros (PyTorch's
// count_include_pad=True): every window's sum times 1 / (kernel_h * kernel_w)
// (within an ulp of PyTorch's division).
Tensor avg_pool2d(const Tensor& x, const Pool2dGeometry& geometry);
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dGeometry& geometry);

// (N, H, W, C) -> (N, C): the mean over H and W.
Tensor global_avg_pool(const Tensor& x);
Tensor global_avg_pool_backward(const Tensor& dy, const Shape& x_shape);

}  // namespace tandem::kernels
