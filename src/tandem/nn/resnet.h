#pragma once
// ResNet for small images (He et al. 2016, section 4.2: the CIFAR networks):
// a 3x3 convolution to `width` channels, three stages of `blocks` basic
// residual blocks each (widths w, 2w, 4w; the second and third stages start
// with stride 2 and a 1x1 convolution + BatchNorm projection shortcut),
// global average pooling and a linear classifier. depth = 6 * blocks + 2:
// ResNet-20 has 3 blocks per stage. Convolutions before a BatchNorm have no
// bias; weights are PyTorch's defaults (kaiming_uniform).
// Parameter names: stem.{0,1}.* (convolution, batch norm),
// stages.S.B.{conv1,bn1,conv2,bn2}.*, stages.S.0.shortcut.{0,1}.*, head.*.

#include <cstdint>
#include <memory>
#include <optional>

#include "tandem/base/random.h"
#include "tandem/nn/conv.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/module.h"
#include "tandem/nn/normalization.h"
#include "tandem/nn/sequential.h"

namespace tandem::nn {

struct ResNetConfig {
  int64_t depth = 20;    // 6n + 2
  int64_t width = 16;    // channels of the first stage
  int64_t channels = 1;  // of the input images
  int64_t classes = 10;
  bool synchronized_batch_norm = false;  // statistics over every replica's rows
  DType compute_dtype = DType::f32;
  std::optional<DType> activation_dtype;
  bool float32_logits = true;
};

// Throws InvalidArgument naming the setting (a depth that is not 6n + 2 with
// n >= 1, non-positive sizes).
void check_resnet_config(const ResNetConfig& config);

// conv3x3(stride) - BN - ReLU - conv3x3 - BN, plus the shortcut, then ReLU.
class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride, const ResNetConfig& config,
             Generator& generator);
  Variable forward(const Variable& x) override;
  bool recomputable() const override { return true; }
  std::string describe() const override;
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;

 private:
  int64_t in_, out_, stride_;
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<Sequential> shortcut_;  // null: identity
};

class ResNet : public Module {
 public:
  ResNet(const ResNetConfig& config, Generator& generator);
  // (N, H, W, channels) -> logits (N, classes).
  Variable forward(const Variable& x) override;
  std::string describe() const override;
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;
  const ResNetConfig& config() const { return config_; }

 private:
  ResNetConfig config_;
  std::shared_ptr<Sequential> stem_, stages_;
  std::shared_ptr<Linear> head_;
};

}  // namespace tandem::nn
