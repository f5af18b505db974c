#include "tandem/nn/normalization.h"

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/nn/graph_builder.h"

namespace tandem::nn {
namespace {

Tensor filled(int64_t n, float value) {
  return Tensor::full(Shape{n}, value, DType::f32, current_device(), MemoryCategory::parameters);
}

void check_last_dim(const Variable& input, int64_t expected, const char* layer) {
  const Shape& s = input.shape();
  if (s.rank() < 2 || s[-1] != expected) {
    TANDEM_THROW(ShapeError, layer, " expects inputs whose last dimension is ", expected, ", got ",
                 s.to_string());
  }
}

}  // namespace

LayerNorm::LayerNorm(int64_t features, float eps) : features_(features), eps_(eps) {
  if (features <= 0 || !(eps > 0.0f)) {
    TANDEM_THROW(InvalidArgument, "LayerNorm: features and eps must be positive, got ", features,
                 " and ", eps);
  }
  gamma_ = register_parameter("weight", filled(features, 1.0f));
  beta_ = register_parameter("bias", filled(features, 0.0f));
}

Variable LayerNorm::forward(const Variable& input) {
  if (input.shape().rank() < 1 || input.shape()[-1] != features_) {
    TANDEM_THROW(ShapeError, "LayerNorm(", features_, ") got input ", input.shape().to_string());
  }
  return layer_norm(input, gamma_, beta_, eps_);
}

std::string LayerNorm::describe() const {
  return "LayerNorm(" + std::to_string(features_) + ")";
}

GraphValue LayerNorm::to_graph(GraphBuilder& g, const GraphValue& x) const {
  const auto on_last_axis = [&](const GraphValue& v) {
    const std::vector<GraphAttribute> last_axis = {{"axes", std::vector<int64_t>{-1}}};
    const GraphValue mean = g.op("ReduceMean", {v.name}, v.rank, last_axis);
    const GraphValue centred = g.op("Sub", {v.name, mean.name}, v.rank);
    const GraphValue squares = g.op("Mul", {centred.name, centred.name}, v.rank);
    const GraphValue variance = g.op("ReduceMean", {squares.name}, v.rank, last_axis);
    const GraphValue deviation =
        g.op("Sqrt", {g.op("Add", {variance.name, g.scalar(eps_)}, v.rank).name}, v.rank);
    const GraphValue normalised = g.op("Div", {centred.name, deviation.name}, v.rank);
    const GraphValue scaled = g.op("Mul", {normalised.name, g.weight(gamma_.value())}, v.rank);
    return g.op("Add", {scaled.name, g.weight(beta_.value())}, v.rank);
  };
  // Images: over each pixel's channels, which the graph holds on axis 1.
  if (x.rank == 4) return to_channels_first(g, on_last_axis(to_channels_last(g, x)));
  return on_last_axis(x);
}

BatchNorm2d::BatchNorm2d(int64_t channels, float eps, float momentum, bool synchronized, bool relu)
    : channels_(channels),
      eps_(eps),
      momentum_(momentum),
      synchronized_(synchronized),
      relu_(relu) {
  if (channels <= 0 || !(eps > 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f)) {
    TANDEM_THROW(InvalidArgument,
                 "BatchNorm2d: channels and eps must be positive and momentum "
                 "in [0, 1], got ",
                 channels, ", ", eps, ", ", momentum);
  }
  gamma_ = register_parameter("weight", filled(channels, 1.0f));
  beta_ = register_parameter("bias", filled(channels, 0.0f));
  running_mean_ = &register_buffer("running_mean", filled(channels, 0.0f));
  running_var_ = &register_buffer("running_var", filled(channels, 1.0f));
}

Variable BatchNorm2d::forward(const Variable& input) {
  check_last_dim(input, channels_, "BatchNorm2d");
  if (synchronized_ && is_training()) {
    if (CrossReplicaSum* replicas = current_cross_replica_sum()) {
      const Variable y = sync_batch_norm(input, gamma_, beta_, *running_mean_, *running_var_,
                                         momentum_, eps_, *replicas);
      return relu_ ? relu(y) : y;
    }
  }
  if (relu_) {
    return batch_norm_relu(input, gamma_, beta_, *running_mean_, *running_var_, is_training(),
                           momentum_, eps_);
  }
  return batch_norm(input, gamma_, beta_, *running_mean_, *running_var_, is_training(), momentum_,
                    eps_);
}

Variable BatchNorm2d::forward_add_relu(const Variable& input, const Variable& residual) {
  if (relu_) {
    TANDEM_THROW(InvalidArgument,
                 "BatchNorm2d::forward_add_relu: this layer applies its own ReLU before the add");
  }
  check_last_dim(input, channels_, "BatchNorm2d");
  if (synchronized_ && is_training() && current_cross_replica_sum() != nullptr)
    return add_relu(forward(input), residual);
  return batch_norm_add_relu(input, gamma_, beta_, residual, *running_mean_, *running_var_,
                             is_training(), momentum_, eps_);
}

std::string BatchNorm2d::describe() const {
  return "BatchNorm2d(" + std::to_string(channels_) + (relu_ ? ", relu)" : ")");
}

GraphValue BatchNorm2d::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  const auto on_axis_1 = [&](const GraphValue& v) {
    const GraphValue y =
        graph.op("BatchNormalization",
                 {v.name, graph.weight(gamma_.value()), graph.weight(beta_.value()),
                  graph.weight(*running_mean_), graph.weight(*running_var_)},
                 v.rank, {{"epsilon", eps_}});
    return relu_ ? graph.op("Relu", {y.name}, v.rank) : y;
  };
  // ONNX's normalises axis 1: a sequence (N, T, F) goes through (N, F, T)
  // (it normalised over T).
  if (x.rank == 3) {
    const std::vector<GraphAttribute> swap = {{"perm", std::vector<int64_t>{0, 2, 1}}};
    const GraphValue features_first = graph.op("Transpose", {x.name}, 3, swap);
    return graph.op("Transpose", {on_axis_1(features_first).name}, 3, swap);
  }
  return on_axis_1(x);
}

}  // namespace tandem::nn
