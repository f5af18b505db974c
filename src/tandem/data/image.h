#pragma once
// Image decoding (JPEG with libjpeg-turbo, PNG with libpng) and the standard
// augmentations as map functions. Images are channels-last (H, W, C) u8 or
// f32. Random augmentations draw from element_random_seed(), so a pipeline
// gives the same augmented elements however many threads run its map.

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/data/dataset.h"

namespace tandem::data {

// Decodes JPEG or PNG bytes (a 1-D u8 tensor) into u8 (H, W, C). channels 0
// keeps the file's (1 or 3; PNG alpha is dropped), 1 or 3 converts. Throws
// IoError for data that is neither or is damaged.
Tensor decode_image(const Tensor& bytes, int channels = 0);

// Encodes u8 (H, W, C) as JPEG (quality 1..100), for tests and benchmarks.
Tensor encode_jpeg(const Tensor& image, int quality = 90);
// Encodes u8 (H, W, C) as PNG.
Tensor encode_png(const Tensor& image);

// Map functions over feature `key` (default "image"):
MapFn decode_image_fn(std::string key = "image", int channels = 0);
// Zero-pads `padding` pixels on each side, then crops back to the original
// size at a random offset (the CIFAR augmentation).
MapFn random_crop_with_padding(int64_t padding, uint64_t seed, std::string key = "image");
// Mirrors the image left-right with probability 1/2.
MapFn random_flip_horizontal(uint64_t seed, std::string key = "image");
// u8 or f32 -> f32: (x / scale - mean[c]) / stddev[c] per channel (scale 255
// for u8 input, 1 for f32).
MapFn normalize(std::vector<float> mean, std::vector<float> stddev, std::string key = "image");
// Converts the feature's dtype (e.g. to bf16 for mixed-precision input).
MapFn cast_to(DType dtype, std::string key = "image");

}  // namespace tandem::data
