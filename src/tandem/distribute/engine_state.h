#pragma once
// EngineState: a training state as named tensors and string metadata, what
// an engine saves and loads and what a checkpoint file holds
// (train::Checkpoint is this type). Names used by the engines:
// "model.<parameter>", "buffer.<buffer>", "optimizer.<slot>"; metadata
// "loss_scale", "loss_scale_skipped", "loss_scale_good_steps" under loss
// scaling; the Trainer adds its position and configuration.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tandem/nn/module.h"
#include "tandem/tensor/tensor.h"

namespace tandem::distribute {

struct EngineState {
  std::map<std::string, std::string> metadata;
  std::vector<std::pair<std::string, Tensor>> tensors;

  // The tensor with this name; throws IoError when absent.
  const Tensor& tensor(const std::string& name) const;
  bool has_tensor(const std::string& name) const;
  // Copies the tensor with this name into `target`; throws IoError when it is
  // absent or differs from target in shape or dtype.
  void load_into(const std::string& name, Tensor& target) const;
  // Metadata value; throws IoError when absent.
  const std::string& meta(const std::string& key) const;
};

// Adds the model's parameters ("model.<name>") and buffers ("buffer.<name>").
void save_model_state(nn::Module& model, EngineState& state);
// Copies the state's parameters and buffers into `model`, which must have
// the same architecture (IoError naming the first tensor that is missing or
// differs in shape or dtype).
void load_model_state(const EngineState& state, nn::Module& model);

}  // namespace tandem::distribute
