#include "tandem/nn/sequential.h"

#include "tandem/nn/conv.h"
#include "tandem/nn/graph_builder.h"

namespace tandem::nn {

Sequential& Sequential::add(std::shared_ptr<Module> module) {
  register_module(std::to_string(layers_.size()), module);
  layers_.push_back(std::move(module));
  return *this;
}

Variable Sequential::forward(const Variable& input) {
  Variable x = input;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (i + 1 < layers_.size()) {
      if (std::optional<Variable> pooled = max_pool_then_relu(*layers_[i], *layers_[i + 1], x)) {
        x = *pooled;
        ++i;
        continue;
      }
    }
    x = (*layers_[i])(x);  // recomputed blocks go through checkpoint()
  }
  return x;
}

std::string Sequential::describe() const {
  return "Sequential(" + std::to_string(layers_.size()) + " layers)";
}

GraphValue Sequential::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  GraphValue v = x;
  for (const auto& layer : layers_) v = layer->to_graph(graph, v);
  return v;
}

}  // namespace tandem::nn
