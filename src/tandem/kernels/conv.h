#pragma once
// 2-D convolution, channels-last, on oneDNN. Legend: N batch, H/W height and
// width, C input channels, O output channels, KH/KW kernel size.
//   x (N, H, W, C), weights (KH, KW, C, O) "HWIO" as in TensorFlow,
//   bias (O,) f32, y (N, OH, OW, O).
// f32, or bf16 inputs (AMX/AVX512-BF16 where present) with f32 or bf16 output.
// Inputs of up to 4 channels (a first layer) take direct kernels instead
// (detail/narrow_conv.h), forward and weight gradient, and max pooling
// with ReLU after such a convolution can run inside it
// (conv2d_max_pool_relu_forward).

#include <cstdint>

#include "tandem/kernels/activation.h"
#include "tandem/kernels/pool.h"
#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

struct Conv2dGeometry {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;  // zero padding on each side
  int64_t dilation_h = 1, dilation_w = 1;
};

// (N, OH, OW, O) for input shape x and weight shape w; throws ShapeError when
// they do not fit (rank, channel mismatch, empty output).
Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dGeometry& geometry);

// y = act(conv(x, w) + bias). bias may be undefined.
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                      const Conv2dGeometry& geometry, Activation activation = Activation::none,
                      DType out_dtype = DType::f32);

// dx (x_shape) from dy and w; dx has out_dtype.
Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv2dGeometry& geometry, DType out_dtype = DType::f32);

// dw (KH, KW, C, O) f32 and, when db is non-null, db (O,) f32, from x and dy.
void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Conv2dGeometry& geometry,
                             Tensor& dw, Tensor* db);

// Whether conv2d_max_pool_relu_forward takes x (its shape, dtype and
// device) with these windows and output dtype: x (N, H, W, C) of up to 4
// channels (a first layer: the direct kernels), x and the output f32 or
// bf16, windows that do not overlap (stride == kernel, no padding, under
// 256 positions; rows and columns past the last whole window are left out,
// as max_pool2d_forward leaves them), on the CPU.
bool conv2d_max_pool_fuses(const Shape& x, DType x_dtype, DeviceKind device,
                           const Pool2dGeometry& pool, DType out_dtype);
inline bool conv2d_max_pool_fuses(const Tensor& x, const Pool2dGeometry& pool, DType out_dtype) {
  return conv2d_max_pool_fuses(x.shape(), x.dtype(), x.device().kind, pool, out_dtype);
}

// relu(max_pool2d(conv(x, w) + bias)) in one pass: the convolution's output
// is computed a window row at a time and pooled in cache, never stored. y
// and (training) the workspace are max_pool2d_forward(conv2d_forward(x, w,
// bias, geometry, none, out_dtype), pool, training, true)'s, bit for bit.
// InvalidArgument where !conv2d_max_pool_fuses.
MaxPoolResult conv2d_max_pool_relu_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                                           const Conv2dGeometry& geometry,
                                           const Pool2dGeometry& pool, DType out_dtype,
                                           bool training);

// dw (KH, KW, C, O) and, when db is non-null, db (O,), f32, from x, the
// pooled gradient dy (y's shape, x's dtype) and the forward's workspace:
// the bits of conv2d_backward_weights(x, max_pool2d_backward(dy, workspace,
// the convolution's output shape, pool), geometry, dw, db), without that
// gradient stored.
void conv2d_max_pool_backward_weights(const Tensor& x, const Tensor& dy, const Tensor& workspace,
                                      const Conv2dGeometry& geometry, const Pool2dGeometry& pool,
                                      Tensor& dw, Tensor* db);

}  // namespace tandem::kernels
