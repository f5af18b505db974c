#include "tandem/nn/graph_builder.h"

#include <cmath>

namespace tandem::nn {

GraphValue activation_to_graph(GraphBuilder& g, const GraphValue& x, kernels::Activation a) {
  switch (a) {
    case kernels::Activation::none:
      return x;
    case kernels::Activation::relu:
      return g.op("Relu", {x.name}, x.rank);
    case kernels::Activation::gelu: {
      // Opset 13 has no Gelu: x * (1 + erf(x / sqrt(2))) / 2.
      const GraphValue scaled = g.op("Div", {x.name, g.scalar(std::sqrt(2.0f))}, x.rank);
      const GraphValue erf = g.op("Erf", {scaled.name}, x.rank);
      const GraphValue one_plus = g.op("Add", {erf.name, g.scalar(1.0f)}, x.rank);
      const GraphValue product = g.op("Mul", {x.name, one_plus.name}, x.rank);
      return g.op("Mul", {product.name, g.scalar(0.5f)}, x.rank);
    }
    case kernels::Activation::gelu_tanh: {
      // x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) / 2.
      const GraphValue cube =
          g.op("Mul", {x.name, g.op("Mul", {x.name, x.name}, x.rank).name}, x.rank);
      const GraphValue inner =
          g.op("Add", {x.name, g.op("Mul", {cube.name, g.scalar(0.044715f)}, x.rank).name}, x.rank);
      const GraphValue t = g.op(
          "Tanh",
          {g.op("Mul", {inner.name, g.scalar(std::sqrt(2.0f / static_cast<float>(M_PI)))}, x.rank)
               .name},
          x.rank);
      const GraphValue one_plus = g.op("Add", {t.name, g.scalar(1.0f)}, x.rank);
      const GraphValue product = g.op("Mul", {x.name, one_plus.name}, x.rank);
      return g.op("Mul", {product.name, g.scalar(0.5f)}, x.rank);
    }
    case kernels::Activation::silu:
      return g.op("Mul", {x.name, g.op("Sigmoid", {x.name}, x.rank).name}, x.rank);
  }
  return x;
}

GraphValue to_channels_last(GraphBuilder& g, const GraphValue& images) {
  return g.op("Transpose", {images.name}, 4, {{"perm", std::vector<int64_t>{0, 2, 3, 1}}});
}

GraphValue to_channels_first(GraphBuilder& g, const GraphValue& images) {
  return g.op("Transpose", {images.name}, 4, {{"perm", std::vector<int64_t>{0, 3, 1, 2}}});
}

GraphValue size_along(GraphBuilder& g, const GraphValue& x, int axis) {
  const GraphValue shape = g.op("Shape", {x.name}, 1);
  return g.op("Slice", {shape.name, g.integers({axis}), g.integers({axis + 1}), g.integers({0})},
              1);
}

GraphValue add_position_rows(GraphBuilder& g, const GraphValue& x, const Tensor& table) {
  const GraphValue t = size_along(g, x, x.rank - 2);
  const GraphValue rows =
      g.op("Slice", {g.weight(table), g.integers({0}), t.name, g.integers({0})}, 2);
  return g.op("Add", {x.name, rows.name}, x.rank);
}

}  // namespace tandem::nn
