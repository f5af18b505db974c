// Batch augmentation: each image comes out as one of the transforms it is
// allowed (checked against naive per-pixel references), the draws cover the
// transforms, the same generator state gives the same batch, and bad specs
// and shapes are errors that name the problem.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "tandem/base/error.h"
#include "tandem/data/augment.h"

namespace tandem::data {
namespace {

constexpr int64_t kN = 64, kH = 5, kW = 7, kC = 2;

Tensor numbered_images() {
  std::vector<float> v(kN * kH * kW * kC);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i + 1);  // no zeros
  return Tensor::from_floats(Shape{kN, kH, kW, kC}, v);
}

// Naive: the pixel (y, x, c) of image n after a flip and a shift by (dy, dx).
float reference(const Tensor& in, int64_t n, int64_t y, int64_t x, int64_t c, bool flip, int64_t dy,
                int64_t dx) {
  const int64_t sy = y + dy, sx = x + dx;
  if (sy < 0 || sy >= kH || sx < 0 || sx >= kW) return 0.0f;
  const int64_t fx = flip ? kW - 1 - sx : sx;
  return in.data<float>()[((n * kH + sy) * kW + fx) * kC + c];
}

bool matches(const Tensor& in, const Tensor& out, int64_t n, bool flip, int64_t dy, int64_t dx) {
  for (int64_t y = 0; y < kH; ++y)
    for (int64_t x = 0; x < kW; ++x)
      for (int64_t c = 0; c < kC; ++c)
        if (out.data<float>()[((n * kH + y) * kW + x) * kC + c] !=
            reference(in, n, y, x, c, flip, dy, dx))
          return false;
  return true;
}

// Which allowed transforms (flip, dy, dx) produce image n; one is expected.
std::vector<std::tuple<bool, int64_t, int64_t>> explanations(const Tensor& in, const Tensor& out,
                                                             int64_t n, const AugmentOptions& o) {
  std::vector<std::tuple<bool, int64_t, int64_t>> found;
  const int64_t p = o.crop_padding;
  for (bool flip : {false, true}) {
    if (flip && !o.flip) continue;
    for (int64_t dy = -p; dy <= p; ++dy)
      for (int64_t dx = -p; dx <= p; ++dx)
        if (matches(in, out, n, flip, dy, dx)) found.emplace_back(flip, dy, dx);
  }
  return found;
}

TEST(Augment, EachImageIsOneAllowedTransformAndTheDrawsCoverThem) {
  const Tensor in = numbered_images();
  for (const char* spec : {"flip", "crop:2", "flip,crop:1"}) {
    const AugmentOptions o = parse_augment(spec);
    Generator g(11);
    const Tensor out = augment_images(in, o, g);
    ASSERT_EQ(out.shape(), in.shape());
    std::set<std::tuple<bool, int64_t, int64_t>> seen;
    for (int64_t n = 0; n < kN; ++n) {
      const auto found = explanations(in, out, n, o);
      ASSERT_EQ(found.size(), 1u) << spec << ": image " << n;
      seen.insert(found[0]);
    }
    const size_t possible =
        (o.flip ? 2 : 1) * static_cast<size_t>((2 * o.crop_padding + 1) * (2 * o.crop_padding + 1));
    // 64 draws from at most 25 transforms: each one shows up with probability > 92%.
    EXPECT_GE(seen.size(), std::min<size_t>(possible, possible * 2 / 3 + 1)) << spec;
    EXPECT_LE(seen.size(), possible) << spec;
  }
}

TEST(Augment, SameGeneratorStateSameBatchAndAnyDtype) {
  const Tensor in = numbered_images();
  const AugmentOptions o = parse_augment("flip,crop:3");
  Generator a(5), b(5), c(6);
  const std::vector<float> first = augment_images(in, o, a).to_floats();
  EXPECT_EQ(first, augment_images(in, o, b).to_floats());
  EXPECT_NE(first, augment_images(in, o, c).to_floats());
  // u8 pixels move the same way as f32 ones: the same generator state
  // gives the f32 copy's result, over enough images that some flip and
  // some crop off-centre.
  Tensor bytes = Tensor::empty(Shape{16, 5, 5, 1}, DType::u8);
  for (int i = 0; i < 16 * 25; ++i) bytes.data<uint8_t>()[i] = static_cast<uint8_t>(i % 251 + 1);
  const AugmentOptions flip_crop = parse_augment("flip,crop:2");
  Generator for_bytes(1), for_floats(1);
  const std::vector<float> moved = augment_images(bytes, flip_crop, for_bytes).to_floats();
  EXPECT_EQ(moved, augment_images(bytes.to(DType::f32), flip_crop, for_floats).to_floats());
  EXPECT_NE(moved, bytes.to_floats());
  // Nothing to do: the batch itself.
  Generator unused(0);
  EXPECT_EQ(augment_images(in, parse_augment("none"), unused).to_floats(), in.to_floats());
}

TEST(Augment, SpecsRoundTripAndBadOnesNameThePart) {
  for (const char* spec : {"none", "flip", "crop:4", "flip,crop:2"})
    EXPECT_EQ(augment_spec(parse_augment(spec)), spec);
  EXPECT_EQ(augment_spec(parse_augment("crop:2,flip")), "flip,crop:2");
  const auto rejects = [](const char* spec, const std::string& expected) {
    try {
      parse_augment(spec);
      ADD_FAILURE() << spec << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  rejects("rotate", "unknown augmentation 'rotate'");
  rejects("flip,", "unknown augmentation ''");
  rejects("crop", "unknown augmentation 'crop'");
  rejects("crop:0", "'crop:0': the crop padding must be a whole number of pixels from 1 to 1024");
  rejects("crop:1025", "'crop:1025'");
  rejects("crop:9223372036854775807", "'crop:9223372036854775807'");
  rejects("crop:2x", "'crop:2x'");
  rejects("crop:-3", "'crop:-3'");
  Generator g(0);
  EXPECT_THROW(augment_images(Tensor::zeros(Shape{4, 28, 28}), parse_augment("flip"), g),
               ShapeError);
}

// A crop padding as large as the images' smaller side shifts whole images
// out: refused, naming the images' size, before and while augmenting.
TEST(Augment, CropPaddingMustBeSmallerThanTheImages) {
  EXPECT_NO_THROW(check_augment(parse_augment("crop:27"), 28, 28));
  EXPECT_NO_THROW(check_augment(parse_augment("flip"), 1, 1));
  try {
    check_augment(parse_augment("flip,crop:100"), 28, 28);
    ADD_FAILURE() << "crop:100 accepted for 28x28 images";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              "augmentation 'crop:100' is too large for 28x28 images: the crop padding must be "
              "smaller than their smaller side (at most crop:27); a shift of 100 pixels leaves a "
              "blank image");
  }
  EXPECT_THROW(check_augment(parse_augment("crop:5"), kH, kW), InvalidArgument);  // 5x7
  Generator g(0);
  EXPECT_THROW(augment_images(numbered_images(), parse_augment("crop:5"), g), InvalidArgument);
  EXPECT_NO_THROW(augment_images(numbered_images(), parse_augment("crop:4"), g));
}

}  // namespace
}  // namespace tandem::data
