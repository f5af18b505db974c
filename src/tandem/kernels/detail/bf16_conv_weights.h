#pragma once
// Private: a convolution's weight gradient on tandem's bf16 engines
// (bf16_engine.h), for bf16 x and dy at stride 1 or 2 with channel counts
// that are multiples of 16 (resnet's convolutions, the cnn's second).
// oneDNN 2.6 runs these at about 360 GFLOP/s on an AMX Xeon, half its
// forward's rate and 27% of resnet's bf16 step, and at 155-184 GFLOP/s on
// Zen 4's AVX512-BF16, 75-90% of its matmul peak (docs/performance.md).
//
// dw[kh][kw][c][o] sums x[n][oh + kh - pad][ow + kw - pad][c] dy[n][oh][ow][o]
// over n, oh, ow. In the zero-padded input's plane flattened to positions
// p = h * Wp + w (Wp = W + 2 pad), output position q = oh * Wp + ow reads
// the input at q + kh Wp + kw: each tap is the same product shifted by a
// constant. On the tiles, a tile of 16 positions of dy (transposed, o by
// position) times a tile of 16 shifted positions of x (position by c) is
// one tile instruction per tap; the dot products broadcast each position's
// dy against the shifted position's row of x, skipping the padding
// positions the tiles multiply. Two images share each product, a bf16 pair
// each, as both engines take pairs: shifts never split a pair. Stride 2
// splits the plane by the parity of rows and columns (bf16_conv_weights.cc).

#include "tandem/kernels/conv.h"
#include "tandem/kernels/detail/bf16_engine.h"

namespace tandem::kernels::detail {

// Whether tandem's kernel takes this weight gradient: a CPU with a bf16
// engine, bf16 x and dy, stride 1 or 2, dilation 1, C and O multiples of 16.
bool bf16_conv_weights_applies(const Tensor& x, const Tensor& dy, const Shape& w,
                               const Conv2dGeometry& geometry);

// dw (f32, HWIO) and, when db is non-null, db (f32) from x and dy, both
// checked by the caller, on `engine` (one the CPU runs). Sums in f32 (the
// accumulators) in an order that depends on the engine but not on the
// thread count; db over each pair of images in f32 and across pairs in
// double. For finite x: the tiles also multiply zero gradients by inputs
// no tap reads (positions past a row, a stride's last row or column),
// where an infinity or NaN makes a NaN the true gradient does not have.
void bf16_conv_backward_weights(const Tensor& x, const Tensor& dy, const Conv2dGeometry& geometry,
                                Tensor& dw, Tensor* db, Bf16Engine engine);

}  // namespace tandem::kernels::detail
