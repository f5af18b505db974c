#pragma once
// A Dataset held in memory for the Trainer (Keras fits a tf.data pipeline,
// tandem's Trainer takes tensors): one pass over the pipeline, its elements
// stacked into LabeledImages. For datasets that fit in memory; the Trainer
// then shuffles, shards and augments per step itself.

#include <string>

#include "tandem/data/dataset.h"
#include "tandem/data/fashion_mnist.h"

namespace tandem::data {

struct MaterializeOptions {
  std::string image_feature = "image";  // f32 (H, W, C) or (H, W) per element
  std::string label_feature = "label";  // i32 () or (1,) per element
};

// Throws ShapeError naming the element index and feature when an element's
// image differs in shape from the first one or is not f32 (map a
// normalisation first), or its label is not one i32; InvalidArgument for a
// dataset without elements. Pipeline errors propagate as they are.
LabeledImages to_labeled_images(const Dataset& dataset, const MaterializeOptions& options = {});

}  // namespace tandem::data
