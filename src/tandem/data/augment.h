#pragma once
// Random augmentation of an assembled batch of images (N, H, W, C), image by
// image: what `tandem train --augment` applies as the Trainer's
// batch_transform. The per-element map functions in image.h do the same
// inside a Dataset pipeline; these draw from a Generator instead, which the
// Trainer seeds per step, so a run's augmentations are reproducible whatever
// thread builds its batches.

#include <cstdint>
#include <string>
#include <string_view>

#include "tandem/base/random.h"
#include "tandem/tensor/tensor.h"

namespace tandem::data {

// A padding beyond an image's size mostly crops zeros; the bound keeps the
// draws' ranges far from overflow.
inline constexpr int64_t kMaxCropPadding = 1024;

struct AugmentOptions {
  bool flip = false;         // mirror left-right with probability 1/2
  int64_t crop_padding = 0;  // zero-pad this many pixels per side, crop back at a random offset
  bool any() const { return flip || crop_padding > 0; }
};

// "none", "flip", "crop:P" or a comma-separated combination ("flip,crop:2").
// Throws InvalidArgument naming the part it cannot read.
AugmentOptions parse_augment(std::string_view spec);
// The spec parse_augment reads back ("flip,crop:2", "none").
std::string augment_spec(const AugmentOptions& options);

// Throws InvalidArgument when `options` make height x width images
// degenerate: a crop padding not smaller than their smaller side (shifts of
// that many pixels leave blank images). The message names the images' size.
void check_augment(const AugmentOptions& options, int64_t height, int64_t width);

// A new batch: for each image in order, a flip bit (with flip) and then the
// row and column offsets in [-P, P] (with crop_padding P) are drawn from
// `generator`. Any dtype; throws ShapeError unless images is (N, H, W, C),
// and what check_augment throws for their height and width.
Tensor augment_images(const Tensor& images, const AugmentOptions& options, Generator& generator);

}  // namespace tandem::data
