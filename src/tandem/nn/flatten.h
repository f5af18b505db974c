#pragma once
// Flatten: (N, d1, d2, ...) -> (N, d1 * d2 * ...).

#include "tandem/nn/module.h"

namespace tandem::nn {

class Flatten : public Module {
 public:
  Variable forward(const Variable& input) override;
  std::string describe() const override { return "Flatten"; }
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;
};

}  // namespace tandem::nn
