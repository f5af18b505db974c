#include "tandem/nn/embedding.h"

#include <vector>

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/nn/graph_builder.h"
#include "tandem/nn/init.h"

namespace tandem::nn {

Embedding::Embedding(int64_t vocabulary, int64_t dim, Generator& generator)
    : vocabulary_(vocabulary), dim_(dim) {
  if (vocabulary <= 0 || dim <= 0) {
    TANDEM_THROW(InvalidArgument, "Embedding: sizes must be positive, got ", vocabulary, " x ",
                 dim);
  }
  Tensor w = Tensor::empty(Shape{vocabulary, dim}, DType::f32, current_device(),
                           MemoryCategory::parameters);
  init::normal(w, 0.0f, 1.0f, generator);
  weight_ = register_parameter("weight", w);
}

Variable Embedding::forward(const Variable& input) {
  return embedding(weight_, input.value());
}

std::string Embedding::describe() const {
  return "Embedding(" + std::to_string(vocabulary_) + ", " + std::to_string(dim_) + ")";
}

GraphValue Embedding::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  return graph.op("Gather", {graph.weight(weight_.value()), x.name}, x.rank + 1);
}

PositionEmbedding::PositionEmbedding(int64_t positions, int64_t dim, Generator& generator)
    : positions_(positions), dim_(dim) {
  if (positions <= 0 || dim <= 0) {
    TANDEM_THROW(InvalidArgument, "PositionEmbedding: sizes must be positive, got ", positions,
                 " x ", dim);
  }
  Tensor w = Tensor::empty(Shape{positions, dim}, DType::f32, current_device(),
                           MemoryCategory::parameters);
  init::normal(w, 0.0f, 0.02f, generator);
  weight_ = register_parameter("weight", w);
}

Variable PositionEmbedding::forward(const Variable& input) {
  const Shape& s = input.shape();
  if (s.rank() < 2 || s.dim(-1) != dim_ || s.dim(-2) > positions_) {
    TANDEM_THROW(ShapeError, "PositionEmbedding(", positions_, ", ", dim_, "): needs (..., T, ",
                 dim_, ") with T <= ", positions_, ", got ", s.to_string());
  }
  const int64_t T = s.dim(-2);
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) ids[static_cast<size_t>(t)] = static_cast<int32_t>(t);
  Variable table = embedding(weight_, Tensor::from_ints(Shape{T}, ids));
  if (table.dtype() != input.dtype()) table = cast(table, input.dtype());
  return add(input, table);
}

std::string PositionEmbedding::describe() const {
  return "PositionEmbedding(" + std::to_string(positions_) + ", " + std::to_string(dim_) + ")";
}

GraphValue PositionEmbedding::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  return add_position_rows(graph, x, weight_.value());
}

}  // namespace tandem::nn
