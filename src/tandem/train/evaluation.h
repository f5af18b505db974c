#pragma once
// Trainer checkpoints outside training: reading one (for `tandem evaluate`
// and resuming), and loading its model state into a freshly built model.

#include <string>
#include <vector>

#include "tandem/nn/module.h"
#include "tandem/train/checkpoint.h"

namespace tandem::train {

// Reads a checkpoint a Trainer wrote; IoError naming the file when it is
// missing, corrupt, or not a trainer checkpoint of this version.
Checkpoint load_trainer_checkpoint(const std::string& path);

// The classes of an image-folder classifier's labels, in label order (empty
// for other data); IoError when the checkpoint's entry is malformed.
std::vector<std::string> checkpoint_class_names(const Checkpoint& checkpoint);

using distribute::load_model_state;

// The format tag trainer checkpoints carry in their "format" metadata.
inline constexpr const char* kTrainerCheckpointFormat = "tandem-trainer-2";

}  // namespace tandem::train
