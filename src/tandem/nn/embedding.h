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

  const Variable& weight() const { return weight_; }

 private:
  int64_t vocabulary_, dim_;
  Variable weight_;
};

}  // namespace tandem::nn
