#pragma once
// Residual: output = activation(layers(input) + shortcut(input)), the layers
// applied in order and named "0", "1", ... like Sequential's; the shortcut is
// the identity, or its own layers ("shortcut.0", ...: a projection such as
// ResNet's 1x1 convolution + BN). Both paths must give the same shape; the
// layers' output dtype is the sum's (the shortcut is cast to it), so a
// residual block keeps the activation dtype of mixed precision.

#include <memory>
#include <vector>

#include "tandem/kernels/activation.h"
#include "tandem/nn/module.h"

namespace tandem::nn {

class Residual : public Module {
 public:
  // Throws InvalidArgument for no layers or a null one.
  explicit Residual(std::vector<std::shared_ptr<Module>> layers,
                    std::vector<std::shared_ptr<Module>> shortcut = {},
                    kernels::Activation activation = kernels::Activation::none);

  // Throws ShapeError naming both shapes when the layers change the shape.
  Variable forward(const Variable& input) override;
  bool recomputable() const override { return true; }
  std::string describe() const override;
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;

  size_t size() const { return layers_.size(); }
  Module& operator[](size_t i) const { return *layers_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> layers_, shortcut_;
  kernels::Activation activation_;
};

}  // namespace tandem::nn
