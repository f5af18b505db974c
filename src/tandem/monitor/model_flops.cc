#include "tandem/monitor/model_flops.h"

#include "tandem/autograd/variable.h"
#include "tandem/base/error.h"
#include "tandem/kernels/flops.h"
#include "tandem/nn/sequential.h"

namespace tandem::monitor {

std::vector<LayerFlops> layer_flops(nn::Module& model, const Shape& example_shape, DType dtype) {
  std::vector<int64_t> dims = {1};
  for (int64_t d : example_shape.dims()) dims.push_back(d);
  struct RestoreMode {
    nn::Module& model;
    bool training = model.is_training();
    ~RestoreMode() { model.train(training); }
  } restore{model};
  model.eval();
  NoGradGuard no_grad;
  Variable x(Tensor::zeros(Shape(dims), dtype));
  std::vector<LayerFlops> out;
  if (auto* sequential = dynamic_cast<nn::Sequential*>(&model)) {
    for (size_t i = 0; i < sequential->size(); ++i) {
      nn::Module& layer = (*sequential)[i];
      const int64_t before = kernels::flops_executed();
      x = layer.forward(x);
      out.push_back({std::to_string(i), layer.describe(),
                     static_cast<double>(kernels::flops_executed() - before)});
    }
  } else {
    const int64_t before = kernels::flops_executed();
    model.forward(x);
    out.push_back(
        {"model", model.describe(), static_cast<double>(kernels::flops_executed() - before)});
  }
  return out;
}

std::vector<LayerFlops> example_layer_flops(nn::Module& model,
                                            const std::optional<data::Element>& example,
                                            const std::string& input) {
  if (!example || !example->has(input)) return {};
  const DType dtype = example->at(input).dtype();
  if (!is_floating(dtype) && dtype != DType::i32) return {};
  try {
    return layer_flops(model, example->at(input).shape(), dtype);
  } catch (const Error&) {
    return {};
  }
}

}  // namespace tandem::monitor
