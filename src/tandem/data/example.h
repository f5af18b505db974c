#pragma once
// tf.train.Example: decoding of the protobuf wire format (Example ->
// Features -> map<string, Feature>; Feature is one of bytes_list, float_list,
// int64_list, or none of them), and parsing into tensors by a feature spec,
// as tf.io.parse_single_example does.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/data/dataset.h"

namespace tandem::data {

struct Feature {
  enum class Kind : uint8_t { none, bytes_list, float_list, int64_list };
  Kind kind = Kind::none;
  std::vector<std::string> bytes;
  std::vector<float> floats;
  std::vector<int64_t> int64s;
  bool packed = false;  // numeric values were packed on the wire

  size_t count() const;
};

std::string_view feature_kind_name(Feature::Kind kind);

// Features in wire order (the order varies between records; do not rely on it).
using Example = std::vector<std::pair<std::string, Feature>>;

// Decodes a serialized Example. Throws IoError describing the malformation.
Example decode_example(std::string_view serialized);

// Serializes an Example as TensorFlow does (numeric lists packed; a feature
// of Kind::none as an empty Feature), for tests and exports:
// decode_example(encode_example(x)) gives x back with packed set on the
// numeric lists.
std::string encode_example(const Example& example);

// How to turn one feature into a tensor (tf.io.FixedLenFeature /
// VarLenFeature):
//   int64_list -> i32 (values outside int32 are an error) or f32
//   float_list -> f32
//   bytes_list -> u8: the single bytes value as a 1-D tensor of its length
struct FeatureSpec {
  std::string name;    // the tensor's name in the parsed element
  std::string source;  // the Example's feature key; empty: `name`
  DType dtype = DType::f32;
  Shape shape;                                      // fixed length: shape.numel() values
  bool variable_length = false;                     // any count, as a 1-D tensor
  std::optional<std::vector<float>> default_value;  // used when the feature is absent
};

// Parses one Example into an Element with one tensor per spec entry. Throws
// InvalidArgument naming the feature for a missing required feature, a wrong
// kind, or a wrong count.
Element parse_example(std::string_view serialized, const std::vector<FeatureSpec>& spec);

// A map function that replaces `record_feature` (from from_tfrecord) by the parsed features.
MapFn example_parser(std::vector<FeatureSpec> spec, std::string record_feature = "record");

}  // namespace tandem::data
