#pragma once
// Evaluating a classifier outside training: the loss and accuracy sums over
// rows of a dataset (what Trainer::evaluate runs on each replica), and a
// trainer checkpoint's model state loaded into a freshly built model, for
// `tandem evaluate`.

#include <cstdint>
#include <string>

#include "tandem/data/fashion_mnist.h"
#include "tandem/nn/module.h"
#include "tandem/train/checkpoint.h"

namespace tandem::train {

struct EvalSums {
  double loss = 0.0;    // sum over examples of the per-example loss
  int64_t correct = 0;  // examples whose arg-max logit is the label
};

// Rows [first, last) of `data`, batch_size rows at a time, in evaluation
// mode without gradients; the model's mode is restored afterwards.
EvalSums evaluate_rows(nn::Module& model, const data::LabeledImages& data, int64_t first,
                       int64_t last, int64_t batch_size);

// Reads a checkpoint a Trainer wrote; IoError naming the file when it is
// missing, corrupt, or not a trainer checkpoint.
Checkpoint load_trainer_checkpoint(const std::string& path);

// Copies the checkpoint's parameters and buffers into `model`, which must be
// built with the same architecture (IoError naming the first tensor that is
// missing or differs in shape or dtype).
void load_model_state(const Checkpoint& checkpoint, nn::Module& model);

// The format tag trainer checkpoints carry in their "format" metadata.
inline constexpr const char* kTrainerCheckpointFormat = "tandem-trainer-1";

}  // namespace tandem::train
