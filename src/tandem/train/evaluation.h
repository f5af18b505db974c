#pragma once
// Trainer checkpoints outside training: reading one (for `tandem evaluate`
// and resuming), and loading its model state into a freshly built model.

#include <cstdint>
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

// Where training stood when a trainer checkpoint was written: epochs done,
// steps into the next, steps in all. IoError naming `source` for a missing,
// malformed or negative entry.
struct CheckpointPosition {
  int64_t epoch = 0, step = 0, global_step = 0;
};
CheckpointPosition checkpoint_position(const distribute::EngineState& state,
                                       const std::string& source);

using distribute::load_model_state;

// The format tag trainer checkpoints carry in their "format" metadata.
inline constexpr const char* kTrainerCheckpointFormat = "tandem-trainer-2";

}  // namespace tandem::train
