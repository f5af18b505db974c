#include "tandem/train/throughput.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/nn/models.h"
#include "tandem/optim/optimizer.h"
#include "tandem/tensor/allocator.h"

namespace tandem::train {

ThroughputResult measure_training_throughput(const ThroughputOptions& options) {
  if (options.batch_size < 1 || options.steps < 1 || options.warmup_steps < 0) {
    TANDEM_THROW(InvalidArgument, "throughput: batch size and steps must be positive, got batch ",
                 options.batch_size, " steps ", options.steps, " warm-up ", options.warmup_steps);
  }
  auto model = nn::make_model(options.model,
                              precision::model_options(options.policy, {.seed = options.seed}));
  auto optimizer = optim::make_optimizer({.name = "sgd", .learning_rate = 0.05, .momentum = 0.9},
                                         model->parameters());
  // A few distinct batches so that no step sees exactly the previous data.
  constexpr int kBatches = 4;
  Generator generator(options.seed + 1);
  std::vector<Tensor> inputs, labels;
  for (int b = 0; b < kBatches; ++b) {
    Tensor x = Tensor::empty(Shape{options.batch_size, 28, 28, 1});
    generator.normal(x.data<float>(), x.numel());
    std::vector<int32_t> y(static_cast<size_t>(options.batch_size));
    for (auto& label : y) label = static_cast<int32_t>(generator.next_below(10));
    inputs.push_back(x);
    labels.push_back(Tensor::from_ints(Shape{options.batch_size}, y));
  }
  ThroughputResult result;
  Allocator& memory = allocator_for(cpu_device());
  auto train_step = [&](int64_t i) {
    const int64_t start_bytes = memory.stats().current(MemoryCategory::activations);
    memory.reset_peaks();
    optimizer->zero_grad();
    const Variable loss =
        softmax_cross_entropy(model->forward(Variable(inputs[i % kBatches])), labels[i % kBatches]);
    loss.backward();
    optimizer->step();
    result.final_loss = loss.value().item();
    result.peak_activation_bytes =
        std::max(result.peak_activation_bytes,
                 memory.stats().peak(MemoryCategory::activations) - start_bytes);
  };
  for (int64_t i = 0; i < options.warmup_steps; ++i) train_step(i);
  result.peak_activation_bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < options.steps; ++i) train_step(i);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.examples_per_second =
      static_cast<double>(options.batch_size * options.steps) / result.seconds;
  return result;
}

}  // namespace tandem::train
