#pragma once
// Parameter-free activation layers.

#include "tandem/nn/module.h"

namespace tandem::nn {

class ReLU : public Module {
 public:
  Variable forward(const Variable& input) override;
  std::string describe() const override { return "ReLU"; }
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;
};

class GELU : public Module {
 public:
  Variable forward(const Variable& input) override;
  std::string describe() const override { return "GELU"; }
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;
};

// GELU's tanh approximation (GPT-2's; PyTorch's approximate="tanh").
class GELUTanh : public Module {
 public:
  Variable forward(const Variable& input) override;
  std::string describe() const override { return "GELU(tanh)"; }
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;
};

class SiLU : public Module {
 public:
  Variable forward(const Variable& input) override;
  std::string describe() const override { return "SiLU"; }
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;
};

}  // namespace tandem::nn
