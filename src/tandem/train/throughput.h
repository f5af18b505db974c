#pragma once
// Training-throughput measurement behind `tandem bench train`: the default
// recipe (SGD, momentum 0.9, lr 0.05) on in-memory random batches, so that the
// figure is the model's step rate, not the input pipeline's.

#include <cstdint>
#include <string>

#include "tandem/precision/policy.h"

namespace tandem::train {

struct ThroughputOptions {
  std::string model = "cnn";
  precision::Policy policy = precision::Policy::float32;
  int64_t batch_size = 128;
  int64_t warmup_steps = 5;  // untimed: primitive creation, allocator warm-up
  int64_t steps = 30;        // timed
  uint64_t seed = 0;
};

struct ThroughputResult {
  double examples_per_second = 0.0;
  double seconds = 0.0;  // timed steps only
  double final_loss = 0.0;
  // Largest rise of the activation memory (forward activations, their
  // gradients, saved tensors) over a timed step's starting level.
  int64_t peak_activation_bytes = 0;
};

// Runs on the calling thread with its current intra-op thread count.
// Throws InvalidArgument for an unknown model or non-positive sizes.
ThroughputResult measure_training_throughput(const ThroughputOptions& options);

}  // namespace tandem::train
