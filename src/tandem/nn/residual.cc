#include "tandem/nn/residual.h"

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"

namespace tandem::nn {

Residual::Residual(std::vector<std::shared_ptr<Module>> layers) : layers_(std::move(layers)) {
  if (layers_.empty()) TANDEM_THROW(InvalidArgument, "Residual needs at least one layer");
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!layers_[i]) TANDEM_THROW(InvalidArgument, "Residual: layer ", i, " is null");
    register_module(std::to_string(i), layers_[i]);
  }
}

Variable Residual::forward(const Variable& input) {
  Variable y = input;
  for (auto& layer : layers_) y = layer->forward(y);
  if (y.shape() != input.shape()) {
    TANDEM_THROW(ShapeError, "Residual: its layers map ", input.shape().to_string(), " to ",
                 y.shape().to_string(), "; they must keep the input's shape");
  }
  // The layers' dtype wins: under mixed precision a block after the input
  // (f32) sums in the activation dtype, and one that ends in the f32 logits
  // layer sums in f32.
  const Variable shortcut = input.dtype() == y.dtype() ? input : cast(input, y.dtype());
  return add(y, shortcut);
}

std::string Residual::describe() const {
  return "Residual(" + std::to_string(layers_.size()) + " layers)";
}

}  // namespace tandem::nn
