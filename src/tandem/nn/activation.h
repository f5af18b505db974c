#pragma once
// Parameter-free activation layers.

#include "tandem/nn/module.h"

namespace tandem::nn {

class ReLU : public Module {
 public:
  Variable forward(const Variable& input) override;
  std::string describe() const override { return "ReLU"; }
};

class GELU : public Module {
 public:
  Variable forward(const Variable& input) override;
  std::string describe() const override { return "GELU"; }
};

// GELU's tanh approximation (GPT-2's; PyTorch's approximate="tanh").
class GELUTanh : public Module {
 public:
  Variable forward(const Variable& input) override;
  std::string describe() const override { return "GELU(tanh)"; }
};

class SiLU : public Module {
 public:
  Variable forward(const Variable& input) override;
  std::string describe() const override { return "SiLU"; }
};

}  // namespace tandem::nn
