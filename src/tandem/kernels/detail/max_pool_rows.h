#pragma once
// Private: one output row of max pooling over rows that a fused producer
// holds in cache (narrow_conv's pooled forward), computed by pool.cc's own
// row loops so that the fused op keeps max_pool2d_forward's bits.

#include <cstdint>

#include "tandem/kernels/detail/float_io.h"
#include "tandem/kernels/pool.h"

namespace tandem::kernels::detail {

// The windows over kernel_h rows of W x C values at `rows` (contiguous),
// windows that tile them (stride == kernel, no padding; W >= kernel_w):
// y (W / kernel_w windows x C) and, when non-null, `where` (u8 positions)
// as max_pool2d_forward writes such a row, `relu` as there.
void max_pool_rows(const float* rows, int64_t W, int64_t C, const Pool2dGeometry& g, bool relu,
                   float* y, uint8_t* where);
void max_pool_rows(const Bf16* rows, int64_t W, int64_t C, const Pool2dGeometry& g, bool relu,
                   Bf16* y, uint8_t* where);

}  // namespace tandem::kernels::detail
