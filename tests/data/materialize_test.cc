// A Dataset materialised for the Trainer: the IDX pipeline with a
// normalising map gives exactly the tensors load_fashion_mnist gives, and
// elements that cannot be stacked are errors naming the element.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "tandem/base/error.h"
#include "tandem/data/fashion_mnist.h"
#include "tandem/data/materialize.h"

namespace tandem::data {
namespace {

Element normalised(Element e) {
  // normalize_images' formula, per element: (H, W) u8 -> (H, W, 1) f32.
  const Tensor& in = e.at("image");
  Tensor out = Tensor::empty(Shape{in.dim(0), in.dim(1), 1}, DType::f32);
  const float scale = 1.0f / (255.0f * kFashionMnistStd);
  const float shift = kFashionMnistMean / kFashionMnistStd;
  for (int64_t i = 0; i < in.numel(); ++i)
    out.data<float>()[i] = static_cast<float>(in.data<uint8_t>()[i]) * scale - shift;
  e.set("image", out);
  return e;
}

TEST(Materialize, IdxPipelineMatchesTheFashionMnistLoader) {
  const std::string dir = TANDEM_FASHION_MNIST_DIR;
  const auto path = [&](const char* stem) {
    const std::string gz = dir + "/" + stem + ".gz";
    return std::filesystem::exists(gz) ? gz : dir + "/" + stem;
  };
  const Dataset pipeline =
      Dataset::from_idx(path("t10k-images-idx3-ubyte"), path("t10k-labels-idx1-ubyte"))
          .map(normalised, {.num_parallel_calls = kAutotune})
          .prefetch(8);
  const LabeledImages got = to_labeled_images(pipeline);
  const LabeledImages expected = load_fashion_mnist(dir).test;
  ASSERT_EQ(got.images.shape(), expected.images.shape());
  EXPECT_EQ(got.labels.to_ints(), expected.labels.to_ints());
  const std::vector<float> a = got.images.to_floats(), b = expected.images.to_floats();
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  EXPECT_LT(worst, 1e-6);
}

TEST(Materialize, ElementsThatCannotBeStackedNameTheElement) {
  const auto image = [](int64_t h, int64_t w, DType dtype) {
    return Tensor::zeros(Shape{h, w, 1}, dtype);
  };
  const auto label = [](int32_t v) { return Tensor::from_ints(Shape{}, std::vector<int32_t>{v}); };
  const auto rejects = [](const Dataset& d, const std::string& expected) {
    try {
      to_labeled_images(d);
      ADD_FAILURE() << "accepted; expected: " << expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  rejects(Dataset::from_elements({{{"image", image(4, 4, DType::f32)}, {"label", label(1)}},
                                  {{"image", image(4, 5, DType::f32)}, {"label", label(2)}}}),
          "element 1: feature 'image' is");
  rejects(Dataset::from_elements({{{"image", image(4, 4, DType::u8)}, {"label", label(1)}}}),
          "element 0: feature 'image' must be an f32 (H, W, C) or (H, W) image (map a "
          "normalisation first)");
  rejects(Dataset::from_elements(
              {{{"image", image(4, 4, DType::f32)}, {"label", Tensor::zeros(Shape{2}, DType::i32)}}}),
          "element 0: feature 'label' must be one i32 label");
  rejects(Dataset::from_elements({{{"picture", image(4, 4, DType::f32)}, {"label", label(1)}}}),
          "picture");
  rejects(Dataset::range(0), "the dataset is empty");
  // (H, W) images gain a channel; labels of shape (1,) are accepted.
  const LabeledImages two = to_labeled_images(Dataset::from_elements(
      {{{"image", Tensor::full(Shape{2, 3}, 1.5f)}, {"label", label(4)}},
       {{"image", Tensor::full(Shape{2, 3}, 2.5f)},
        {"label", Tensor::from_ints(Shape{1}, std::vector<int32_t>{7})}}}));
  EXPECT_EQ(two.images.shape(), (Shape{2, 2, 3, 1}));
  EXPECT_EQ(two.labels.to_ints(), (std::vector<int32_t>{4, 7}));
  EXPECT_EQ(two.images.to_floats()[6], 2.5f);
}

}  // namespace
}  // namespace tandem::data
