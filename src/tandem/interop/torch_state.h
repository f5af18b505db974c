#pragma once
// A model's weights as PyTorch names them and lays them out (a state_dict):
// the parameters' and buffers' dotted names ("stem.0.weight",
// "blocks.3.attention.qkv.weight", "1.running_mean"), each tensor permuted
// where the layer stores another layout (Module::torch_axes: Conv2d's
// channels-last weight). Export and import through safetensors files.

#include <string>
#include <utility>
#include <vector>

#include "tandem/interop/safetensors.h"
#include "tandem/nn/module.h"

namespace tandem::train {
class Trainer;
}

namespace tandem::interop {

// The model's parameters and buffers in PyTorch's names and layouts, as
// `dtype` (f32, or bf16/f16 to halve the file).
std::vector<std::pair<std::string, Tensor>> torch_state(nn::Module& model,
                                                        DType dtype = DType::f32);

// Writes torch_state(model, dtype) to a safetensors file with the metadata
// (plus "format": "pt", as PyTorch's writers record).
void save_safetensors(nn::Module& model, const std::string& path, DType dtype = DType::f32,
                      std::map<std::string, std::string> metadata = {});

// What loading found besides the tensors it loaded.
struct LoadReport {
  std::vector<std::string> loaded;
  std::vector<std::string> missing;     // the model's, absent from the file
  std::vector<std::string> unexpected;  // the file's, not in the model
  std::vector<std::string> ignored;     // PyTorch's BatchNorm num_batches_tracked counters
};

struct LoadOptions {
  // Strict (PyTorch's load_state_dict(strict=True)): a missing or unexpected
  // tensor is an error. Either way a tensor of the wrong shape or dtype is.
  bool strict = true;
};

// Loads the file's tensors into the model's parameters and buffers, taking
// PyTorch's layouts back to tandem's. Floating-point tensors (F32, BF16,
// F16) load into f32 ones (widening is exact). Throws InvalidArgument
// listing every missing, unexpected and mismatched tensor (name, the file's
// dtype and shape, the model's) before the model is changed.
LoadReport load_safetensors(const SafetensorsFile& file, nn::Module& model,
                            const LoadOptions& options = {});

// Loads into every local replica of the trainer (a run starting from
// pretrained weights: `tandem train --init-from`). Each process reads the
// file itself, so every replica of a multi-process job starts the same.
LoadReport load_safetensors(const SafetensorsFile& file, train::Trainer& trainer,
                            const LoadOptions& options = {});

}  // namespace tandem::interop
