#include "support/model_batches.h"

#include <vector>

#include "support/gradcheck.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/random.h"
#include "tandem/nn/module.h"

namespace tandem::testing {

data::Element token_batch(int64_t step, int64_t rows) {
  Generator g(static_cast<uint64_t>(step) + 10);
  std::vector<int32_t> x(static_cast<size_t>(rows * 16)), y(x.size());
  for (auto& t : x) t = static_cast<int32_t>(g.next_below(256));
  for (auto& t : y) t = static_cast<int32_t>(g.next_below(256));
  return data::Element{{"tokens", Tensor::from_ints(Shape{rows, 16}, x)},
                       {"targets", Tensor::from_ints(Shape{rows, 16}, y)}};
}

data::Element image_batch(int64_t step, int64_t rows, int64_t side) {
  std::vector<int32_t> y(static_cast<size_t>(rows));
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>((i + step) % 10);
  return data::Element{
      {"image", random_tensor(Shape{rows, side, side, 1}, -1, 1, static_cast<uint64_t>(20 + step))},
      {"label", Tensor::from_ints(Shape{rows}, y)}};
}

data::Element regression_batch(int64_t rows, int64_t features, uint64_t seed) {
  Generator g(seed);
  std::vector<float> x(static_cast<size_t>(features * rows)), y(static_cast<size_t>(rows));
  g.uniform(x.data(), features * rows, -1.0f, 1.0f);
  g.uniform(y.data(), rows, -1.0f, 1.0f);
  return {{"x", Tensor::from_floats(Shape{rows, features}, x)},
          {"y", Tensor::from_floats(Shape{rows}, y)}};
}

Variable language_model_loss(nn::Module& model, const distribute::ReplicaBatch& batch) {
  return softmax_cross_entropy_per_example(model.forward(Variable(batch.rows.at("tokens"))),
                                           batch.rows.at("targets"));
}

Variable image_classifier_loss(nn::Module& model, const distribute::ReplicaBatch& batch) {
  return softmax_cross_entropy_per_example(model.forward(Variable(batch.rows.at("image"))),
                                           batch.rows.at("label"));
}

Variable squared_error_loss(nn::Module& model, const distribute::ReplicaBatch& batch) {
  const Variable p =
      reshape(model.forward(Variable(batch.rows.at("x"))), batch.rows.at("y").shape());
  const Variable e = add(p, scale(Variable(batch.rows.at("y")), -1.0f));
  return mul(e, e);
}

}  // namespace tandem::testing
