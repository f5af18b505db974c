#pragma once
// Training-throughput measurement behind `tandem bench train`: the default
// recipe (SGD, momentum 0.9, lr 0.05) on in-memory random batches, so that the
// figure is the model's step rate, not the input pipeline's. Image models
// (cnn, mlp, resnet) get 28x28x1 images and 10 classes; gpt gets random
// tokens of its full context and the cross-entropy over every position.

#include <cstdint>
#include <optional>
#include <string>

#include "tandem/base/random.h"
#include "tandem/optim/optimizer.h"
#include "tandem/precision/policy.h"
#include "tandem/tensor/tensor.h"

namespace tandem::train {

struct ThroughputOptions {
  std::string model = "cnn";
  std::string settings;  // the built-in's settings (nn::ModelOptions::settings)
  precision::Policy policy = precision::Policy::float32;
  int64_t batch_size = 128;
  int64_t warmup_steps = 5;  // untimed: primitive creation, allocator warm-up
  int64_t steps = 30;        // timed
  uint64_t seed = 0;
  // Unset: the model's recipe, as the peers' benchmarks (bench/pytorch,
  // bench/tensorflow) train it: gpt AdamW at 6e-4 (weight decay 0.01), the
  // image models SGD with momentum 0.9 at 0.05. Set: that optimizer with its
  // defaults (optim::default_learning_rate, momentum 0.9 where it applies).
  std::optional<optim::OptimizerKind> optimizer;
  // Where the model and batches live: a CPU device (the calling thread's
  // intra-op threads) or a GPU (each step ends with its loss read back, so
  // the timing covers the queued work).
  Device device = cpu_device();
};

struct ThroughputResult {
  double examples_per_second = 0.0;
  double seconds = 0.0;  // timed steps only
  double final_loss = 0.0;
  // Tokens per example (gpt: its context; 1 for the image models) and the
  // model's training FLOPs per example: gpt's by the usual formula (6 x
  // parameters + 12 x layers x context x width per token, the attention
  // counted once, not its masked half); the image models' as the matrix
  // kernels counted them over the timed steps (every matmul and
  // convolution pass that ran: three forwards less the first layer's input
  // gradient, which nothing needs). The count is process-wide, so other
  // threads' matrix kernels during the measurement would inflate it.
  int64_t tokens_per_example = 1;
  double model_flops_per_example = 0.0;
  // Largest rise of the activation memory (forward activations, their
  // gradients, saved tensors) over a timed step's starting level.
  int64_t peak_activation_bytes = 0;
  optim::OptimizerKind optimizer = optim::OptimizerKind::sgd;  // the one that ran
};

// i32 token ids of `shape`, uniform in [0, vocabulary), drawn in order from
// `generator`: the synthetic input of language-model benchmarks.
Tensor random_tokens(const Shape& shape, int64_t vocabulary, Generator& generator);

// Runs on the calling thread with its current intra-op thread count.
// Throws InvalidArgument for an unknown model or non-positive sizes.
ThroughputResult measure_training_throughput(const ThroughputOptions& options);

}  // namespace tandem::train
