// tf.train.Example protobuf parsing: decoded whole, and parsed against a
// spec of fixed-length, variable-length and defaulted features.
#include "fuzz_input.h"
#include "tandem/base/error.h"
#include "tandem/data/example.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const std::string_view bytes = fuzz::as_text(data, size);
  try {
    data::decode_example(bytes);
  } catch (const Error&) {
  }
  static const std::vector<data::FeatureSpec> spec = {
      {.name = "image", .dtype = DType::u8, .shape = Shape{1}},
      {.name = "label", .dtype = DType::i32, .shape = Shape{}, .default_value = {{0.0f}}},
      {.name = "tokens", .dtype = DType::i32, .variable_length = true},
      {.name = "x", .dtype = DType::f32, .shape = Shape{2, 2}, .default_value = {{0, 0, 0, 0}}}};
  try {
    data::parse_example(bytes, spec);
  } catch (const Error&) {
  }
  return 0;
}
