// Learns XOR with a two-layer MLP using tandem's autograd, layers and Adam.
// Exits with status 1 if it did not learn (the install test runs it).
#include <cstdio>

#include "tandem/tandem.h"

int main() {
  using namespace tandem;
  const Tensor inputs =
      Tensor::from_floats(Shape{4, 2}, std::vector<float>{0, 0, 0, 1, 1, 0, 1, 1});
  const Tensor labels = Tensor::from_ints(Shape{4}, std::vector<int32_t>{0, 1, 1, 0});

  Generator init(42);
  nn::Sequential model;
  model.emplace<nn::Linear>(2, 16, nn::LinearOptions{.activation = kernels::Activation::relu}, init)
      .emplace<nn::Linear>(16, 2, nn::LinearOptions{}, init);
  optim::Adam adam(model.parameters(), 0.05);

  float loss_value = 0.0f;
  for (int step = 0; step < 300; ++step) {
    adam.zero_grad();
    const Variable loss = softmax_cross_entropy(model(Variable(inputs)), labels);
    loss.backward();
    adam.step();
    loss_value = loss.value().item();
  }
  NoGradGuard no_grad;
  const int64_t correct = kernels::count_correct(model(Variable(inputs)).value(), labels);
  std::printf("xor: final loss %.4f, %lld/4 correct\n", loss_value,
              static_cast<long long>(correct));
  return correct == 4 ? 0 : 1;
}
