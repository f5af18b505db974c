#pragma once
// Dropout layer: active in training mode only. Masks come from the calling
// thread's generator (thread_generator()), which a trainer reseeds each step so
// that runs and resumed runs draw the same masks.

#include "tandem/nn/module.h"

namespace tandem::nn {

class Dropout : public Module {
 public:
  // p in [0, 1); throws InvalidArgument otherwise.
  explicit Dropout(float p = 0.5f);
  Variable forward(const Variable& input) override;
  std::string describe() const override;
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;

 private:
  float p_;
};

}  // namespace tandem::nn
