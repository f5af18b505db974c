#include "tandem/train/throughput.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/kernels/flops.h"
#include "tandem/nn/models.h"
#include "tandem/nn/transformer.h"
#include "tandem/optim/optimizer.h"
#include "tandem/tensor/allocator.h"

namespace tandem::train {

Tensor random_tokens(const Shape& shape, int64_t vocabulary, Generator& generator) {
  std::vector<int32_t> ids(static_cast<size_t>(shape.numel()));
  const auto v = static_cast<uint64_t>(vocabulary);
  for (auto& t : ids) t = static_cast<int32_t>(generator.next_below(v));
  return Tensor::from_ints(shape, ids, cpu_device());
}

ThroughputResult measure_training_throughput(const ThroughputOptions& options) {
  if (options.batch_size < 1 || options.steps < 1 || options.warmup_steps < 0) {
    TANDEM_THROW(InvalidArgument, "throughput: batch size and steps must be positive, got batch ",
                 options.batch_size, " steps ", options.steps, " warm-up ", options.warmup_steps);
  }
  DeviceScope on_device(options.device);
  auto model = nn::make_model(
      options.model, precision::model_options(
                         options.policy, {.seed = options.seed, .settings = options.settings}));
  const auto* gpt = dynamic_cast<const nn::Gpt*>(model.get());
  ThroughputResult result;
  result.optimizer = options.optimizer.value_or(gpt != nullptr ? optim::OptimizerKind::adamw
                                                               : optim::OptimizerKind::sgd);
  const bool recipe = !options.optimizer;
  auto optimizer = optim::make_optimizer(
      {.kind = result.optimizer,
       .learning_rate = recipe && gpt != nullptr ? 6e-4
                        : recipe                 ? 0.05
                                                 : optim::default_learning_rate(result.optimizer)},
      model->parameters());
  // A few distinct batches so that no step sees exactly the previous data.
  constexpr int kBatches = 4;
  Generator generator(options.seed + 1);
  std::vector<Tensor> inputs, labels;
  const int64_t B = options.batch_size;
  for (int b = 0; b < kBatches; ++b) {
    if (gpt != nullptr) {
      const int64_t T = gpt->config().context, V = gpt->config().vocabulary;
      inputs.push_back(random_tokens(Shape{B, T}, V, generator).to(options.device));
      labels.push_back(random_tokens(Shape{B * T}, V, generator).to(options.device));
      continue;
    }
    Tensor x = Tensor::empty(Shape{B, 28, 28, 1}, DType::f32, cpu_device());
    generator.normal(x.data<float>(), x.numel());
    std::vector<int32_t> y(static_cast<size_t>(B));
    for (auto& label : y) label = static_cast<int32_t>(generator.next_below(10));
    inputs.push_back(x.to(options.device));
    labels.push_back(Tensor::from_ints(Shape{B}, y, options.device));
  }
  const auto logits_of = [&](const Variable& out) {
    return gpt != nullptr
               ? reshape(out, Shape{out.shape().numel() / out.shape()[2], out.shape()[2]})
               : out;
  };
  if (gpt != nullptr) {
    const nn::GptConfig& c = gpt->config();
    result.tokens_per_example = c.context;
    result.model_flops_per_example = static_cast<double>(c.context) *
                                     (6.0 * static_cast<double>(model->parameter_count()) +
                                      12.0 * static_cast<double>(c.layers * c.context * c.width));
  }
  Allocator& memory = allocator_for(options.device);
  auto train_step = [&](int64_t i) {
    const int64_t start_bytes = memory.stats().current(MemoryCategory::activations);
    memory.reset_peaks();
    optimizer->zero_grad();
    const Variable loss = softmax_cross_entropy(
        logits_of(model->forward(Variable(inputs[i % kBatches]))), labels[i % kBatches]);
    loss.backward();
    optimizer->step();
    result.final_loss = loss.value().item();
    result.peak_activation_bytes =
        std::max(result.peak_activation_bytes,
                 memory.stats().peak(MemoryCategory::activations) - start_bytes);
  };
  for (int64_t i = 0; i < options.warmup_steps; ++i) train_step(i);
  result.peak_activation_bytes = 0;
  const int64_t flops_before = kernels::flops_executed();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < options.steps; ++i) train_step(i);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto examples = static_cast<double>(options.batch_size * options.steps);
  result.examples_per_second = examples / result.seconds;
  if (gpt == nullptr) {
    result.model_flops_per_example =
        static_cast<double>(kernels::flops_executed() - flops_before) / examples;
  }
  return result;
}

}  // namespace tandem::train
