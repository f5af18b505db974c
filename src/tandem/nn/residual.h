#pragma once
// Residual: output = input + layers(input), the layers applied in order and
// named "0", "1", ... like Sequential's. The layers must map the input to its
// own shape; their output's dtype is the sum's (the shortcut is cast to it),
// so a residual block keeps the activation dtype of mixed precision.

#include <memory>
#include <vector>

#include "tandem/nn/module.h"

namespace tandem::nn {

class Residual : public Module {
 public:
  // Throws InvalidArgument for no layers or a null one.
  explicit Residual(std::vector<std::shared_ptr<Module>> layers);

  // Throws ShapeError naming both shapes when the layers change the shape.
  Variable forward(const Variable& input) override;
  std::string describe() const override;

  size_t size() const { return layers_.size(); }
  Module& operator[](size_t i) const { return *layers_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace tandem::nn
