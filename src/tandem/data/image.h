#pragma once
// Image decoding (JPEG with libjpeg-turbo, PNG with libpng), single-image
// helpers (resize, centre crop, normalise) and the standard augmentations as
// map functions. Images are channels-last (H, W, C) u8 or f32. Random
// augmentations draw from element_random_seed(), so a pipeline gives the same
// augmented elements however many threads run its map.

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/data/dataset.h"

namespace tandem::data {

// Images larger than this (H * W pixels, 8192 x 8192) are refused from their
// header, before any pixel memory is allocated. A JPEG's source size counts
// as well as its decoded size, also for a scaled decode: libjpeg-turbo keeps
// a progressive JPEG's coefficients for the whole source (6 bytes a pixel at
// 4:4:4, so 384 MB at the cap, and 24 GB for the format's 65500 x 65500).
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 26;

struct DecodeOptions {
  int channels = 0;  // 0 keeps the file's (1 or 3; PNG alpha is dropped), 1 or 3 converts
  // A JPEG whose size is at least twice this decodes at 1/2, 1/4 or 1/8 scale
  // (libjpeg-turbo's DCT scaling, much cheaper than decoding in full and
  // resizing): to the smallest of them still at least min_height x
  // min_width, sizes rounded up. 0 leaves that side unconstrained; both 0
  // decode at full size, as do PNGs.
  int64_t min_height = 0;
  int64_t min_width = 0;
};

// Decodes JPEG or PNG bytes (a 1-D u8 tensor) into u8 (H, W, C). channels 0
// keeps the file's (1 or 3; PNG alpha is dropped, 16-bit samples keep their
// high byte, as TensorFlow's decode_png), 1 or 3 converts (to gray by
// BT.601 luma). Throws
// IoError for data that is neither, is damaged, or would decode to more than
// kMaxImagePixels pixels (a JPEG: or from more), checked from the header
// before any pixel memory is allocated.
Tensor decode_image(const Tensor& bytes, int channels = 0);
// The same with scaled JPEG decoding (see DecodeOptions). Throws
// InvalidArgument for negative minimum sizes or bad channels.
Tensor decode_image(const Tensor& bytes, const DecodeOptions& options);

// Encodes u8 (H, W, C) as JPEG (quality 1..100), for tests and benchmarks.
Tensor encode_jpeg(const Tensor& image, int quality = 90);
// Encodes u8 (H, W, C) as PNG.
Tensor encode_png(const Tensor& image);

// image (H, W, C) f32 or u8 -> (height, width, C), the same dtype (u8
// rounded): bilinear with half-pixel centres, as tf.image.resize without
// antialiasing (kernels::resize_bilinear). Thread-safe. Throws ShapeError for
// another rank or dtype, InvalidArgument for a size below 1x1.
Tensor resize_image(const Tensor& image, int64_t height, int64_t width);

// The central height x width window of image (H, W, C), any dtype, as a new
// tensor; the top-left corner is ((H - height) / 2, (W - width) / 2), rounded
// down (tf.image / Keras CenterCrop). Throws ShapeError when the window is
// larger than the image or the image is not (H, W, C), InvalidArgument for a
// size below 1x1.
Tensor center_crop(const Tensor& image, int64_t height, int64_t width);

// image (..., C) channels-last, u8 or f32 (bf16, f16 too) -> f32 of the same
// shape: (x * scale - mean[c]) / stddev[c]. mean and stddev hold one value
// per channel or a single value for all. Throws InvalidArgument for empty
// lists or a stddev that is not positive, ShapeError for a channel count that
// matches neither.
Tensor normalize_image(const Tensor& image, float scale, const std::vector<float>& mean,
                       const std::vector<float>& stddev);

// Map functions over feature `key` (default "image"):
MapFn decode_image_fn(std::string key = "image", int channels = 0);
MapFn decode_image_fn(std::string key, DecodeOptions options);
// resize_image and center_crop as map functions.
MapFn resize_image_fn(int64_t height, int64_t width, std::string key = "image");
MapFn center_crop_fn(int64_t height, int64_t width, std::string key = "image");
// Zero-pads `padding` pixels on each side, then crops back to the original
// size at a random offset (the CIFAR augmentation).
MapFn random_crop_with_padding(int64_t padding, uint64_t seed, std::string key = "image");
// Mirrors the image left-right with probability 1/2.
MapFn random_flip_horizontal(uint64_t seed, std::string key = "image");
// u8 or f32 -> f32: normalize_image with scale 1/255 for u8 input, 1
// otherwise. mean and stddev: one value per channel, or one for all.
MapFn normalize(std::vector<float> mean, std::vector<float> stddev, std::string key = "image");
// Converts the feature's dtype (e.g. to bf16 for mixed-precision input).
MapFn cast_to(DType dtype, std::string key = "image");

}  // namespace tandem::data
