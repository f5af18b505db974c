#include "tandem/nn/linear.h"

#include <cmath>

#include "tandem/base/error.h"
#include "tandem/nn/graph_builder.h"
#include "tandem/nn/init.h"

namespace tandem::nn {

Linear::Linear(int64_t in_features, int64_t out_features, const LinearOptions& options,
               Generator& generator)
    : in_features_(in_features), out_features_(out_features), options_(options) {
  if (in_features <= 0 || out_features <= 0) {
    TANDEM_THROW(InvalidArgument, "Linear: feature counts must be positive, got ", in_features,
                 " -> ", out_features);
  }
  Tensor w = Tensor::empty(Shape{out_features, in_features}, DType::f32, current_device(),
                           MemoryCategory::parameters);
  init::kaiming_uniform(w, in_features, std::sqrt(5.0f), generator);
  weight_ = register_parameter("weight", w);
  if (options.bias) {
    Tensor b = Tensor::empty(Shape{out_features}, DType::f32, current_device(),
                             MemoryCategory::parameters);
    const float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
    init::uniform(b, -bound, bound, generator);
    bias_ = register_parameter("bias", b);
  }
}

Variable Linear::forward(const Variable& input) {
  return linear(input, weight_, bias_,
                {.activation = options_.activation,
                 .compute_dtype = options_.compute_dtype,
                 .output_dtype = options_.output_dtype});
}

std::string Linear::describe() const {
  std::string text =
      "Linear(" + std::to_string(in_features_) + " -> " + std::to_string(out_features_);
  if (options_.activation != kernels::Activation::none) {
    text += ", " + std::string(kernels::activation_name(options_.activation));
  }
  if (options_.compute_dtype != DType::f32)
    text += ", " + std::string(dtype_name(options_.compute_dtype));
  return text + ")";
}

GraphValue Linear::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  if (x.rank < 2) {
    TANDEM_THROW(InvalidArgument, describe(),
                 ": ONNX export takes a Linear on (..., features), got rank ", x.rank);
  }
  const auto on_last_axis = [&](const GraphValue& v) {
    GraphValue y;
    if (v.rank == 2) {
      std::vector<std::string> inputs = {v.name, graph.weight(weight_.value())};
      if (options_.bias) inputs.push_back(graph.weight(bias_.value()));
      y = graph.op("Gemm", inputs, 2, {{"transB", int64_t{1}}});
    } else {  // sequences and pixels: Gemm takes matrices only
      const GraphValue w_t = graph.op("Transpose", {graph.weight(weight_.value())}, 2,
                                      {{"perm", std::vector<int64_t>{1, 0}}});
      y = graph.op("MatMul", {v.name, w_t.name}, v.rank);
      if (options_.bias) y = graph.op("Add", {y.name, graph.weight(bias_.value())}, v.rank);
    }
    return activation_to_graph(graph, y, options_.activation);
  };
  // Images: on each pixel's channels, which the graph holds on axis 1.
  if (x.rank == 4) return to_channels_first(graph, on_last_axis(to_channels_last(graph, x)));
  return on_last_axis(x);
}

}  // namespace tandem::nn
