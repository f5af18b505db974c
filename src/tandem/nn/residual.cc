#include "tandem/nn/residual.h"

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/nn/graph_builder.h"

namespace tandem::nn {

Residual::Residual(std::vector<std::shared_ptr<Module>> layers,
                   std::vector<std::shared_ptr<Module>> shortcut, kernels::Activation activation)
    : layers_(std::move(layers)), shortcut_(std::move(shortcut)), activation_(activation) {
  if (layers_.empty()) TANDEM_THROW(InvalidArgument, "Residual needs at least one layer");
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!layers_[i]) TANDEM_THROW(InvalidArgument, "Residual: layer ", i, " is null");
    register_module(std::to_string(i), layers_[i]);
  }
  for (size_t i = 0; i < shortcut_.size(); ++i) {
    if (!shortcut_[i]) TANDEM_THROW(InvalidArgument, "Residual: shortcut layer ", i, " is null");
    register_module("shortcut." + std::to_string(i), shortcut_[i]);
  }
}

Variable Residual::forward(const Variable& input) {
  Variable y = input;
  for (auto& layer : layers_) y = (*layer)(y);
  Variable skip = input;
  for (auto& layer : shortcut_) skip = (*layer)(skip);
  if (y.shape() != skip.shape()) {
    TANDEM_THROW(ShapeError, "Residual: its layers map ", input.shape().to_string(), " to ",
                 y.shape().to_string(), " but its shortcut to ", skip.shape().to_string(),
                 "; both paths must give the same shape");
  }
  // The layers' dtype wins over an identity shortcut: under mixed precision
  // a block after the input (f32) sums in the activation dtype. A computed
  // shortcut that ends in the f32 logits layer (the last in build order)
  // keeps f32, as layers that end in it do.
  if (!shortcut_.empty() && skip.dtype() == DType::f32 && y.dtype() != DType::f32)
    y = cast(y, DType::f32);
  if (skip.dtype() != y.dtype()) skip = cast(skip, y.dtype());
  const Variable sum = add(y, skip);
  return activation_ == kernels::Activation::none ? sum : activation(sum, activation_);
}

std::string Residual::describe() const {
  std::string text = "Residual(" + std::to_string(layers_.size()) + " layers";
  if (!shortcut_.empty()) text += ", shortcut of " + std::to_string(shortcut_.size());
  if (activation_ != kernels::Activation::none)
    text += std::string(", then ") + std::string(kernels::activation_name(activation_));
  return text + ")";
}

GraphValue Residual::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  GraphValue y = x;
  for (const auto& layer : layers_) y = layer->to_graph(graph, y);
  GraphValue skip = x;
  for (const auto& layer : shortcut_) skip = layer->to_graph(graph, skip);
  return activation_to_graph(graph, graph.op("Add", {y.name, skip.name}, y.rank), activation_);
}

}  // namespace tandem::nn
