#pragma once
// Small batches and per-example losses for the gpt and resnet built-ins, for
// the equivalence tests (mirrored in process, multi-worker under mpirun):
// every call with the same step gives the same batch.

#include <cstdint>

#include "tandem/autograd/variable.h"
#include "tandem/data/element.h"
#include "tandem/distribute/engine.h"

namespace tandem::testing {

// "tokens" and "targets": i32 (rows, 16), random bytes seeded by step.
data::Element token_batch(int64_t step, int64_t rows = 6);
// "image" f32 (rows, side, side, 1) and "label" i32 (rows,), seeded by
// step. The mlp and cnn built-ins take Fashion-MNIST's side, 28.
data::Element image_batch(int64_t step, int64_t rows, int64_t side = 12);

// "x" f32 (rows, features) and "y" f32 (rows,), uniform in [-1, 1) from
// Generator(seed): x first, then y.
data::Element regression_batch(int64_t rows, int64_t features, uint64_t seed);

// Cross-entropy per example of the model's logits on "tokens" against
// "targets", and of its logits on "image" against "label".
Variable language_model_loss(nn::Module& model, const distribute::ReplicaBatch& batch);
Variable image_classifier_loss(nn::Module& model, const distribute::ReplicaBatch& batch);
// Squared error per example of the model's output on "x" (reshaped to
// "y"'s shape) against "y".
Variable squared_error_loss(nn::Module& model, const distribute::ReplicaBatch& batch);

}  // namespace tandem::testing
