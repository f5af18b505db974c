#pragma once
// Private: direct convolution for inputs of a few channels (a network's
// first layer: 1 to 4 channels, images in grey or colour), forward and
// weight gradient, f32 or bf16 storage computed in f32. oneDNN 2.6 runs
// such shapes at 30 GFLOP/s on an AMX Xeon, in bf16 or f32 alike (the
// cnn's 1->32 3x3 convolution: 3.8 ms of a 19.3 ms bf16 step before,
// docs/performance.md); each output pixel here is a few dozen vector FMAs.

#include <cstdint>

#include "tandem/kernels/conv.h"
#include "tandem/kernels/pool.h"

namespace tandem::kernels::detail {

inline constexpr int64_t kNarrowChannels = 4;

// Whether the direct kernels take x (N, H, W, C) with this activation.
bool narrow_conv_applies(const Shape& x, Activation activation);

// y = act(conv(x, w) + bias) into y (checked and allocated by the caller).
void narrow_conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                         const Conv2dGeometry& geometry, Activation activation, Tensor& y);

// dw (f32) and, when db is non-null, db (f32) from x and dy (checked by the
// caller). Sums in f32 over blocks of 8 output rows and in double across
// blocks, in an order that does not depend on the thread count.
void narrow_conv_backward_weights(const Tensor& x, const Tensor& dy, const Conv2dGeometry& geometry,
                                  Tensor& dw, Tensor* db);

// relu(max_pool(conv(x, w) + bias)) into y (N, OH / kernel_h, OW /
// kernel_w, O) and, when non-null, where (u8, y's shape: each maximum's
// position), for pooling windows that tile the convolution's output
// (stride == kernel, no padding; its rows and columns past the last whole
// window left out). Each window row's convolution rows are computed,
// rounded to y's dtype (f32 or bf16) and pooled while in cache, never
// stored: the bits of narrow_conv_forward without activation, then
// max_pool2d_forward with relu. Checked and allocated by the caller.
void narrow_conv_pool_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                              const Conv2dGeometry& geometry, const Pool2dGeometry& pool, Tensor& y,
                              Tensor* where);

// dw and, when db is non-null, db (f32) from x, the pooled gradient dy (f32
// or bf16) and narrow_conv_pool_forward's positions, the convolution's
// output gradient never stored: on AVX-512 with windows two columns wide,
// output channels in multiples of 16 and finite x, only the products of
// the windows' maxima are taken; elsewhere each row's gradient is built in
// cache from the window row over it (so an infinity or NaN in x meets the
// zero gradients as in the composition). The bits of
// narrow_conv_backward_weights(x, max_pool2d_backward(dy, where, ...)).
void narrow_conv_pool_backward_weights(const Tensor& x, const Tensor& dy, const Tensor& where,
                                       const Conv2dGeometry& geometry, const Pool2dGeometry& pool,
                                       Tensor& dw, Tensor* db);

}  // namespace tandem::kernels::detail
