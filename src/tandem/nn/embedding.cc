#include "tandem/nn/embedding.h"

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/nn/init.h"

namespace tandem::nn {

Embedding::Embedding(int64_t vocabulary, int64_t dim, Generator& generator)
    : vocabulary_(vocabulary), dim_(dim) {
  if (vocabulary <= 0 || dim <= 0) {
    TANDEM_THROW(InvalidArgument, "Embedding: sizes must be positive, got ", vocabulary, " x ",
                 dim);
  }
  Tensor w =
      Tensor::empty(Shape{vocabulary, dim}, DType::f32, current_device(), MemoryCategory::parameters);
  init::normal(w, 0.0f, 1.0f, generator);
  weight_ = register_parameter("weight", w);
}

Variable Embedding::forward(const Variable& input) {
  return embedding(weight_, input.value());
}

std::string Embedding::describe() const {
  return "Embedding(" + std::to_string(vocabulary_) + ", " + std::to_string(dim_) + ")";
}

}  // namespace tandem::nn
