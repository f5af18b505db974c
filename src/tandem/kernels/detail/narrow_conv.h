#pragma once
// Private: direct convolution for inputs of a few channels (a network's
// first layer: 1 to 4 channels, images in grey or colour), forward and
// weight gradient, f32 or bf16 storage computed in f32. oneDNN 2.6 runs
// such shapes at 30 GFLOP/s on an AMX Xeon, in bf16 or f32 alike (the
// cnn's 1->32 3x3 convolution: 3.8 ms of a 19.3 ms bf16 step before,
// docs/performance.md); each output pixel here is a few dozen vector FMAs.

#include <cstdint>

#include "tandem/kernels/conv.h"

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

}  // namespace tandem::kernels::detail
