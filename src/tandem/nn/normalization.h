#pragma once
// LayerNorm (over the last dimension) and BatchNorm2d (per channel of
// channels-last images; also works on (N, C)), with PyTorch's defaults.

#include "tandem/nn/module.h"

namespace tandem::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t features, float eps = 1e-5f);
  Variable forward(const Variable& input) override;
  std::string describe() const override;
  // Opset 13 has no LayerNormalization: the formula over the last axis.
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;

 private:
  int64_t features_;
  float eps_;
  Variable gamma_, beta_;
};

class BatchNorm2d : public Module {
 public:
  // synchronized: in training under a replicated strategy, take the batch
  // statistics over all replicas (synchronised batch norm) instead of each
  // replica's own rows. relu: the output is max(0, BN(x)), in the same pass
  // where the kernels fuse them (single-device statistics, f32 and bf16).
  explicit BatchNorm2d(int64_t channels, float eps = 1e-5f, float momentum = 0.1f,
                       bool synchronized = false, bool relu = false);
  Variable forward(const Variable& input) override;
  // max(0, BN(input) + residual): a residual block's end, in one pass where
  // the kernels fuse it (batch_norm_add_relu). InvalidArgument for a layer
  // built with relu (its own ReLU would come before the add).
  Variable forward_add_relu(const Variable& input, const Variable& residual);
  std::string describe() const override;
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;

  const Tensor& running_mean() const { return *running_mean_; }
  const Tensor& running_var() const { return *running_var_; }

 private:
  int64_t channels_;
  float eps_, momentum_;
  bool synchronized_, relu_;
  Variable gamma_, beta_;
  Tensor* running_mean_;
  Tensor* running_var_;
};

}  // namespace tandem::nn
