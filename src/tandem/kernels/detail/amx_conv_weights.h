#pragma once
// Private: a convolution's weight gradient on the AMX tiles, for bf16 x and
// dy at stride 1 or 2 with channel counts that are multiples of 16 (resnet's
// convolutions, the cnn's second). oneDNN 2.6 runs these at about 360
// GFLOP/s on an AMX Xeon, half its forward's rate and 27% of resnet's bf16
// step (docs/performance.md).
//
// dw[kh][kw][c][o] sums x[n][oh + kh - pad][ow + kw - pad][c] dy[n][oh][ow][o]
// over n, oh, ow. In the zero-padded input's plane flattened to positions
// p = h * Wp + w (Wp = W + 2 pad), output position q = oh * Wp + ow reads
// the input at q + kh Wp + kw: each tap is the same product shifted by a
// constant, so a tile of 16 positions of dy (transposed, o by position)
// times a tile of 16 shifted positions of x (position by c) is one tile
// instruction per tap. Two images share each tile, a bf16 pair each, as
// the tiles' dot products take pairs: shifts never split a pair. Stride 2
// splits the plane by the parity of rows and columns (amx_conv_weights.cc).

#include "tandem/kernels/conv.h"

namespace tandem::kernels::detail {

// Whether the AMX kernel takes this weight gradient: an AMX CPU (amx.h),
// bf16 x and dy, stride 1 or 2, dilation 1, C and O multiples of 16.
bool amx_conv_weights_applies(const Tensor& x, const Tensor& dy, const Shape& w,
                              const Conv2dGeometry& geometry);

// dw (f32, HWIO) and, when db is non-null, db (f32) from x and dy, both
// checked by the caller. Sums in f32 (the tiles' accumulators) in an order
// that does not depend on the thread count; db over each pair of images in
// f32 and across pairs in double.
void amx_conv_backward_weights(const Tensor& x, const Tensor& dy, const Conv2dGeometry& geometry,
                               Tensor& dw, Tensor* db);

}  // namespace tandem::kernels::detail
