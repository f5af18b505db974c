#pragma once
// Element: what a Dataset yields, a small ordered set of named tensors
// (e.g. "image" and "label"), as a tf.data element is a dict of tensors.

#include <string>
#include <utility>
#include <vector>

#include "tandem/tensor/tensor.h"

namespace tandem::data {

class Element {
 public:
  Element() = default;
  Element(std::initializer_list<std::pair<std::string, Tensor>> features) : features_(features) {}

  // The feature with this name; throws InvalidArgument listing the names present.
  const Tensor& at(const std::string& name) const;
  Tensor& at(const std::string& name);
  bool has(const std::string& name) const;
  // Adds or replaces a feature.
  void set(const std::string& name, Tensor value);

  const std::vector<std::pair<std::string, Tensor>>& features() const { return features_; }
  size_t size() const { return features_.size(); }
  // "image: f32 (28, 28, 1), label: i32 ()"
  std::string describe() const;

 private:
  std::vector<std::pair<std::string, Tensor>> features_;
};

// The element with every feature on `device`: itself when they all are
// (host batches for CPU replicas cost nothing), else copies (a GPU replica's
// input, copied on its thread's stream).
Element on_device(const Element& element, Device device);

// Bytes (file names, encoded images, TFRecord records) travel as 1-D u8 tensors.
Tensor bytes_tensor(const std::string& bytes);
std::string tensor_bytes(const Tensor& tensor);

}  // namespace tandem::data
