#pragma once
// The built-in models: DESIGN.md's reference models, exactly as defined
// there, for 28x28x1 channels-last images and 10 classes, and the workloads
// that look like real jobs, `gpt` (nn/transformer.h: a byte-level GPT) and
// `resnet` (nn/resnet.h: ResNet-20 for 28x28x1 images), whose sizes are
// settings ("layers=4,width=128").
//   cnn: Conv 1->32 3x3 pad 1 + ReLU, MaxPool 2, Conv 32->64 3x3 pad 1 + ReLU,
//        MaxPool 2, Flatten, Dense 3136->128 + ReLU, Dense 128->10 (421,642 parameters)
//   mlp: Flatten, Dense 784->512 + ReLU, Dense 512->512 + ReLU, Dense 512->10
// ReLUs are fused into the preceding layer (oneDNN post-op), which computes
// the same function as a separate ReLU layer.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/nn/sequential.h"

namespace tandem::nn {

struct ModelOptions {
  uint64_t seed = 0;                 // initialisation
  DType compute_dtype = DType::f32;  // dtype of the matmul/conv units
  // dtype of the activations between layers (mixed precision stores them in
  // bf16 or f16); default: the input's (f32).
  std::optional<DType> activation_dtype;
  bool float32_outputs = true;  // the logits in f32 whatever the activations
  // The architecture's settings, "key=value,key=value" (gpt: vocabulary,
  // context, layers, width, heads, mlp_ratio, dropout; resnet: depth, width,
  // channels, classes, sync_bn); cnn and mlp take none.
  std::string settings;
};

// Throws InvalidArgument unless the compute dtype is f32 or bf16 and the
// activation dtype, when given, is floating (f32, bf16, f16).
void check_model_options(const ModelOptions& options);

// The output dtype of a model's last matmul/conv layer (its logits): f32
// when float32_outputs asks for it, else the activation dtype (nullopt: the
// input's dtype).
std::optional<DType> last_layer_output_dtype(const ModelOptions& options);

std::shared_ptr<Sequential> make_cnn(const ModelOptions& options = {});
std::shared_ptr<Sequential> make_mlp(const ModelOptions& options = {});
// "cnn", "mlp", "gpt" or "resnet"; throws InvalidArgument naming the known
// models otherwise, and naming the setting for an unknown or bad one.
std::shared_ptr<Module> make_model(const std::string& name, const ModelOptions& options = {});
// The settings in canonical form (sorted by key): what a checkpoint records.
// Validates them without building the model; throws as make_model.
std::string canonical_settings(const std::string& name, const std::string& settings);
std::vector<std::string> model_names();

}  // namespace tandem::nn
