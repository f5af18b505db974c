#include "tandem/nn/activation.h"

#include "tandem/autograd/functions.h"
#include "tandem/nn/graph_builder.h"

namespace tandem::nn {

Variable ReLU::forward(const Variable& input) {
  return relu(input);
}
Variable GELU::forward(const Variable& input) {
  return gelu(input);
}
Variable GELUTanh::forward(const Variable& input) {
  return gelu_tanh(input);
}
Variable SiLU::forward(const Variable& input) {
  return silu(input);
}

GraphValue ReLU::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  return activation_to_graph(graph, x, kernels::Activation::relu);
}

GraphValue GELU::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  return activation_to_graph(graph, x, kernels::Activation::gelu);
}

GraphValue GELUTanh::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  return activation_to_graph(graph, x, kernels::Activation::gelu_tanh);
}

GraphValue SiLU::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  return activation_to_graph(graph, x, kernels::Activation::silu);
}

}  // namespace tandem::nn
