#pragma once
// Bilinear image resizing on oneDNN's resampling primitive, channels-last.
// Sampling uses half-pixel centres: output pixel i reads the input at
// (i + 0.5) * in / out - 0.5, clamped to the edge pixels, as tf.image.resize
// (bilinear, no antialiasing) and PyTorch's interpolate(align_corners=False)
// do. Downscaling does not low-pass filter first.

#include <cstdint>

#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

// images (N, H, W, C) or (H, W, C), f32 or u8 -> (N, height, width, C) or
// (height, width, C) of the same dtype; u8 results are rounded to the nearest
// integer (and saturate). One oneDNN primitive per (input shape, output size,
// dtype) is built and cached. Thread-safe. Throws ShapeError for another rank
// or dtype, or an empty image with a non-empty output; InvalidArgument unless
// height and width are at least 1 and the output fits in memory.
Tensor resize_bilinear(const Tensor& images, int64_t height, int64_t width);

}  // namespace tandem::kernels
