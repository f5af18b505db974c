#include "tandem/data/feature_ops.h"

#include <algorithm>

#include "tandem/base/error.h"

namespace tandem::data {

MapFn concat_features(std::vector<std::string> inputs, std::string output) {
  if (inputs.empty()) TANDEM_THROW(InvalidArgument, "concat_features needs at least one feature");
  if (output.empty()) TANDEM_THROW(InvalidArgument, "concat_features needs an output name");
  return [inputs, output](Element e) {
    int64_t total = 0;
    for (const std::string& name : inputs) {
      const Tensor& t = e.at(name);
      if (!is_floating(t.dtype()) && t.dtype() != DType::i32) {
        TANDEM_THROW(InvalidArgument, "concat_features: feature '", name, "' is ",
                     dtype_name(t.dtype()), ", expected numbers");
      }
      total += t.numel();
    }
    Tensor out = Tensor::empty(Shape{total});
    float* dst = out.data<float>();
    for (const std::string& name : inputs) {
      const std::vector<float> values = e.at(name).to(DType::f32).to_floats();
      dst = std::copy(values.begin(), values.end(), dst);
    }
    Element result;
    for (const auto& [name, t] : e.features()) {
      if (std::find(inputs.begin(), inputs.end(), name) == inputs.end()) result.set(name, t);
    }
    result.set(output, std::move(out));
    return result;
  };
}

MapFn select_features(std::vector<std::string> names) {
  if (names.empty()) TANDEM_THROW(InvalidArgument, "select_features needs at least one feature");
  return [names](const Element& e) {
    Element out;
    for (const std::string& name : names) out.set(name, e.at(name));
    return out;
  };
}

}  // namespace tandem::data
