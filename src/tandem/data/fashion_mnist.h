#pragma once
// Fashion-MNIST (Debian's dataset-fashion-mnist): 60,000 training and 10,000
// test images of 28x28 grey pixels in 10 classes, loaded as channels-last f32
// images scaled to [0, 1] and normalised with mean 0.2860 and std 0.3530.

#include <string>

#include "tandem/data/dataset.h"
#include "tandem/tensor/tensor.h"

namespace tandem::data {

inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;
inline constexpr int64_t kFashionMnistClasses = 10;

// Labelled images held in memory.
struct LabeledImages {
  Tensor images;  // (N, H, W, C) f32
  Tensor labels;  // (N,) i32
  int64_t size() const { return labels.defined() ? labels.dim(0) : 0; }
};

struct FashionMnist {
  LabeledImages train;
  LabeledImages test;
};

// Where Debian installs the dataset.
std::string default_fashion_mnist_dir();

// Loads the four files ({train,t10k}-{images-idx3,labels-idx1}-ubyte, each
// gzipped or not) from dir. Throws IoError naming the directory or file when
// something is missing or malformed (wrong dimensions, image and label counts
// that differ, labels outside 0..9).
FashionMnist load_fashion_mnist(const std::string& dir);

// One {"image", "label"} element per row, in order (Dataset::from_tensors).
Dataset as_dataset(const LabeledImages& images);

// Converts u8 images (N, H, W) or (N, H, W, 1) to normalised f32 (N, H, W, 1).
Tensor normalize_images(const Tensor& u8_images, float mean, float stddev);

}  // namespace tandem::data
