#include "tandem/nn/flatten.h"

#include "tandem/autograd/functions.h"
#include "tandem/nn/graph_builder.h"

namespace tandem::nn {

Variable Flatten::forward(const Variable& input) {
  return flatten(input);
}

GraphValue Flatten::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  GraphValue v = x;
  // Back to tandem's (N, H, W, C) order, which the next layer's weights expect.
  if (x.rank == 4)
    v = graph.op("Transpose", {x.name}, 4, {{"perm", std::vector<int64_t>{0, 2, 3, 1}}});
  return graph.op("Flatten", {v.name}, 2, {{"axis", int64_t{1}}});
}

}  // namespace tandem::nn
