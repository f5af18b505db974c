#include "tandem/data/augment.h"

#include <algorithm>
#include <vector>

#include "tandem/base/error.h"
#include "tandem/base/parse_number.h"
#include "tandem/data/detail/image_ops.h"

namespace tandem::data {

AugmentOptions parse_augment(std::string_view spec) {
  AugmentOptions options;
  if (spec == "none") return options;
  size_t begin = 0;
  for (;;) {
    const size_t comma = spec.find(',', begin);
    const std::string_view part = spec.substr(begin, comma - begin);
    if (part == "flip") {
      options.flip = true;
    } else if (part.starts_with("crop:")) {
      const int64_t padding = parse_number<int64_t>(part.substr(5)).value_or(-1);
      if (padding < 1 || padding > kMaxCropPadding) {
        TANDEM_THROW(InvalidArgument, "augmentation '", part,
                     "': the crop padding must be a whole number of pixels from 1 to ",
                     kMaxCropPadding);
      }
      options.crop_padding = padding;
    } else {
      TANDEM_THROW(InvalidArgument, "unknown augmentation '", part,
                   "' (expected none, flip, crop:PIXELS or a comma-separated list)");
    }
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return options;
}

std::string augment_spec(const AugmentOptions& options) {
  std::vector<std::string> parts;
  if (options.flip) parts.emplace_back("flip");
  if (options.crop_padding > 0) parts.push_back("crop:" + std::to_string(options.crop_padding));
  if (parts.empty()) return "none";
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) out += "," + parts[i];
  return out;
}

void check_augment(const AugmentOptions& options, int64_t height, int64_t width) {
  const int64_t side = std::min(height, width);
  if (options.crop_padding == 0 || options.crop_padding < side) return;
  TANDEM_THROW(InvalidArgument, "augmentation 'crop:", options.crop_padding, "' is too large for ",
               height, "x", width,
               " images: the crop padding must be smaller than their smaller side (at most crop:",
               std::max<int64_t>(side - 1, 0), "); a shift of ", options.crop_padding,
               " pixels leaves a blank image");
}

Tensor augment_images(const Tensor& images, const AugmentOptions& options, Generator& generator) {
  if (images.rank() != 4) {
    TANDEM_THROW(ShapeError, "augment_images: expected a batch of (N, H, W, C) images, got ",
                 images.to_string());
  }
  if (options.crop_padding < 0 || options.crop_padding > kMaxCropPadding) {
    TANDEM_THROW(InvalidArgument, "augment_images: crop padding ", options.crop_padding,
                 " is outside 0..", kMaxCropPadding);
  }
  if (!options.any()) return images;
  const int64_t N = images.dim(0), H = images.dim(1), W = images.dim(2);
  check_augment(options, H, W);
  const size_t pixel = static_cast<size_t>(images.dim(3)) * dtype_size(images.dtype());
  const size_t image_bytes = static_cast<size_t>(H * W) * pixel;
  const int64_t p = options.crop_padding;
  Tensor out = Tensor::zeros(images.shape(), images.dtype());
  std::vector<char> flipped(options.flip ? image_bytes : 0);
  const auto* src = static_cast<const char*>(images.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int64_t i = 0; i < N; ++i) {
    const char* image = src + static_cast<size_t>(i) * image_bytes;
    if (options.flip && generator.next_below(2) == 1) {
      detail::flip_horizontal(image, flipped.data(), H, W, pixel);
      image = flipped.data();
    }
    int64_t dy = 0, dx = 0;
    if (p > 0) {
      dy = static_cast<int64_t>(generator.next_below(static_cast<uint64_t>(2 * p + 1))) - p;
      dx = static_cast<int64_t>(generator.next_below(static_cast<uint64_t>(2 * p + 1))) - p;
    }
    detail::shift_into_zeros(image, dst + static_cast<size_t>(i) * image_bytes, H, W, pixel, dy,
                             dx);
  }
  return out;
}

}  // namespace tandem::data
