#include "tandem/nn/resnet.h"

#include <fmt/format.h>

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/nn/graph_builder.h"

namespace tandem::nn {
namespace {

Conv2dOptions conv_options(const ResNetConfig& c, int64_t stride, int64_t padding) {
  return {.stride = stride,
          .padding = padding,
          .bias = false,
          .compute_dtype = c.compute_dtype,
          .output_dtype = c.activation_dtype};
}

}  // namespace

void check_resnet_config(const ResNetConfig& c) {
  if (c.depth < 8 || (c.depth - 2) % 6 != 0) {
    TANDEM_THROW(InvalidArgument,
                 "resnet: depth must be 6n + 2 with n >= 1 (20, 32, 44, 56, 110), got ", c.depth);
  }
  // At most 2^31, as a model file's sizes (the widest stage is 4 x width).
  static constexpr int64_t kMaxSize = int64_t{1} << 31;
  const auto positive = [](int64_t v, const char* name) {
    if (v <= 0) TANDEM_THROW(InvalidArgument, "resnet: ", name, " must be positive, got ", v);
    if (v > kMaxSize)
      TANDEM_THROW(InvalidArgument, "resnet: ", name, " must be at most ", kMaxSize, ", got ", v);
  };
  positive(c.width, "width");
  positive(c.channels, "channels");
  positive(c.classes, "classes");
}

BasicBlock::BasicBlock(int64_t in, int64_t out, int64_t stride, const ResNetConfig& config,
                       Generator& generator)
    : in_(in), out_(out), stride_(stride) {
  conv1_ = std::make_shared<Conv2d>(in, out, 3, conv_options(config, stride, 1), generator);
  bn1_ = std::make_shared<BatchNorm2d>(out, 1e-5f, 0.1f, config.synchronized_batch_norm, true);
  conv2_ = std::make_shared<Conv2d>(out, out, 3, conv_options(config, 1, 1), generator);
  bn2_ = std::make_shared<BatchNorm2d>(out, 1e-5f, 0.1f, config.synchronized_batch_norm);
  register_module("conv1", conv1_);
  register_module("bn1", bn1_);
  register_module("conv2", conv2_);
  register_module("bn2", bn2_);
  if (stride != 1 || in != out) {
    shortcut_ = std::make_shared<Sequential>();
    shortcut_->emplace<Conv2d>(in, out, 1, conv_options(config, stride, 0), generator)
        .emplace<BatchNorm2d>(out, 1e-5f, 0.1f, config.synchronized_batch_norm);
    register_module("shortcut", shortcut_);
  }
}

Variable BasicBlock::forward(const Variable& x) {
  const Variable h = conv2_->forward(bn1_->forward(conv1_->forward(x)));
  Variable skip = shortcut_ ? shortcut_->forward(x) : x;
  if (skip.dtype() != h.dtype()) skip = cast(skip, h.dtype());
  return bn2_->forward_add_relu(h, skip);
}

std::string BasicBlock::describe() const {
  return fmt::format("BasicBlock({} -> {}, stride {}{})", in_, out_, stride_,
                     shortcut_ ? ", projection" : "");
}

ResNet::ResNet(const ResNetConfig& config, Generator& generator) : config_(config) {
  check_resnet_config(config);
  const int64_t per_stage = (config.depth - 2) / 6;
  stem_ = std::make_shared<Sequential>();
  stem_->emplace<Conv2d>(config.channels, config.width, 3, conv_options(config, 1, 1), generator)
      .emplace<BatchNorm2d>(config.width, 1e-5f, 0.1f, config.synchronized_batch_norm, true);
  register_module("stem", stem_);
  stages_ = std::make_shared<Sequential>();
  int64_t in = config.width;
  for (int64_t s = 0; s < 3; ++s) {
    const int64_t out = config.width << s;
    auto stage = std::make_shared<Sequential>();
    for (int64_t b = 0; b < per_stage; ++b) {
      stage->emplace<BasicBlock>(in, out, b == 0 && s > 0 ? 2 : 1, config, generator);
      in = out;
    }
    stages_->add(stage);
  }
  register_module("stages", stages_);
  head_ = std::make_shared<Linear>(
      in, config.classes,
      LinearOptions{.compute_dtype = config.compute_dtype,
                    .output_dtype = config.float32_logits ? std::optional<DType>(DType::f32)
                                                          : config.activation_dtype},
      generator);
  register_module("head", head_);
}

Variable ResNet::forward(const Variable& x) {
  Variable h = x;
  if (config_.activation_dtype && h.dtype() != *config_.activation_dtype)
    h = cast(h, *config_.activation_dtype);
  return head_->forward(global_avg_pool(stages_->forward(stem_->forward(h))));
}

std::string ResNet::describe() const {
  return fmt::format("ResNet-{}(width {}, {} classes{})", config_.depth, config_.width,
                     config_.classes, config_.synchronized_batch_norm ? ", synchronised BN" : "");
}

GraphValue BasicBlock::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  const GraphValue h = bn2_->to_graph(
      graph, conv2_->to_graph(graph, bn1_->to_graph(graph, conv1_->to_graph(graph, x))));
  const GraphValue skip = shortcut_ ? shortcut_->to_graph(graph, x) : x;
  return graph.op("Relu", {graph.op("Add", {h.name, skip.name}, 4).name}, 4);
}

GraphValue ResNet::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  const GraphValue features = stages_->to_graph(graph, stem_->to_graph(graph, x));
  return head_->to_graph(graph, GlobalAvgPool().to_graph(graph, features));
}

}  // namespace tandem::nn
