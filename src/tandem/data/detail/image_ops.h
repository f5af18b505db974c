#pragma once
// Private: the pixel moves behind the random augmentations, on one image of
// H x W pixels of `pixel` bytes each (channels-last, contiguous), shared by
// the per-element map functions (image.cc) and the batch augmentation
// (augment.cc).

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace tandem::data::detail {

// dst = src mirrored left-right.
inline void flip_horizontal(const char* src, char* dst, int64_t H, int64_t W, size_t pixel) {
  for (int64_t y = 0; y < H; ++y) {
    for (int64_t x = 0; x < W; ++x)
      std::memcpy(dst + (y * W + x) * pixel, src + (y * W + (W - 1 - x)) * pixel, pixel);
  }
}

// dst pixel (y, x) = src pixel (y + dy, x + dx), zero outside src: a crop of
// the zero-padded image at offset (dy, dx) from the centre. dst must be zeroed.
inline void shift_into_zeros(const char* src, char* dst, int64_t H, int64_t W, size_t pixel,
                             int64_t dy, int64_t dx) {
  const int64_t x0 = std::max<int64_t>(0, -dx), x1 = std::min(W, W - dx);
  if (x1 <= x0) return;
  for (int64_t y = 0; y < H; ++y) {
    const int64_t sy = y + dy;
    if (sy < 0 || sy >= H) continue;
    std::memcpy(dst + (y * W + x0) * pixel, src + (sy * W + x0 + dx) * pixel,
                static_cast<size_t>(x1 - x0) * pixel);
  }
}

}  // namespace tandem::data::detail
