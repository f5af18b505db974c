#include "tandem/nn/dropout.h"

#include <fmt/format.h>

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/nn/graph_builder.h"

namespace tandem::nn {

Dropout::Dropout(float p) : p_(p) {
  if (!(p >= 0.0f && p < 1.0f)) {
    TANDEM_THROW(InvalidArgument, "Dropout probability must be in [0, 1), got ", p);
  }
}

Variable Dropout::forward(const Variable& input) {
  return dropout(input, p_, is_training(), thread_generator());
}

std::string Dropout::describe() const {
  return fmt::format("Dropout(p={})", p_);
}

GraphValue Dropout::to_graph(GraphBuilder&, const GraphValue& x) const {
  return x;  // inference: the identity
}

}  // namespace tandem::nn
