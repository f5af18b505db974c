#include "tandem/data/materialize.h"

#include <cstring>
#include <vector>

#include "tandem/base/error.h"

namespace tandem::data {

LabeledImages to_labeled_images(const Dataset& dataset, const MaterializeOptions& options) {
  MemoryCategoryScope input_memory(MemoryCategory::input);
  std::vector<Tensor> images;
  std::vector<int32_t> labels;
  Shape shape;
  Iterator it = dataset.iterator();
  for (std::optional<Element> e = it.next(); e; e = it.next()) {
    const int64_t index = static_cast<int64_t>(labels.size());
    const Tensor& image = e->at(options.image_feature);
    if (image.dtype() != DType::f32 || (image.rank() != 2 && image.rank() != 3)) {
      TANDEM_THROW(ShapeError, "element ", index, ": feature '", options.image_feature,
                   "' must be an f32 (H, W, C) or (H, W) image (map a normalisation first), got ",
                   image.to_string());
    }
    if (images.empty()) {
      shape = image.rank() == 3 ? image.shape() : Shape{image.dim(0), image.dim(1), 1};
    } else if (image.numel() != shape.numel() || image.dim(0) != shape[0] ||
               image.dim(1) != shape[1]) {
      TANDEM_THROW(ShapeError, "element ", index, ": feature '", options.image_feature, "' is ",
                   image.to_string(), ", the first element's was ", shape.to_string());
    }
    const Tensor& label = e->at(options.label_feature);
    if (label.dtype() != DType::i32 || label.numel() != 1 || label.rank() > 1) {
      TANDEM_THROW(ShapeError, "element ", index, ": feature '", options.label_feature,
                   "' must be one i32 label, got ", label.to_string());
    }
    images.push_back(image);
    labels.push_back(label.data<int32_t>()[0]);
  }
  if (labels.empty()) TANDEM_THROW(InvalidArgument, "to_labeled_images: the dataset is empty");
  const auto n = static_cast<int64_t>(labels.size());
  Tensor stacked = Tensor::empty(Shape{n, shape[0], shape[1], shape[2]}, DType::f32);
  const size_t bytes = static_cast<size_t>(shape.numel()) * sizeof(float);
  auto* out = static_cast<char*>(stacked.raw_data());
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(out + static_cast<size_t>(i) * bytes, images[static_cast<size_t>(i)].raw_data(),
                bytes);
  return {stacked, Tensor::from_ints(Shape{n}, labels)};
}

}  // namespace tandem::data
