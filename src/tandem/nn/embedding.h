#pragma once
// Embedding: a (V, D) table looked up by i32 indices (the input Variable's
// value); initialised N(0, 1) as in PyTorch.

#include "tandem/base/random.h"
#include "tandem/nn/module.h"

namespace tandem::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t vocabulary, int64_t dim, Generator& generator = thread_generator());
  // input: i32 indices of any shape S -> (S..., dim).
  Variable forward(const Variable& input) override;
  std::string describe() const override;
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;

  const Variable& weight() const { return weight_; }

 private:
  int64_t vocabulary_, dim_;
  Variable weight_;
};

// Learned position embeddings: adds row t of a (positions, dim) table to
// position t of (..., T, dim) inputs, T <= positions; initialised N(0, 0.02)
// as GPT-2's. The table is cast to the input's dtype (mixed precision).
class PositionEmbedding : public Module {
 public:
  PositionEmbedding(int64_t positions, int64_t dim, Generator& generator = thread_generator());
  // Throws ShapeError for a rank below 2, a last dimension other than dim,
  // or more positions than the table has.
  Variable forward(const Variable& input) override;
  std::string describe() const override;
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;

 private:
  int64_t positions_, dim_;
  Variable weight_;
};

}  // namespace tandem::nn
