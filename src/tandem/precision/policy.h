#pragma once
// Mixed-precision policies with Keras semantics: a policy names the compute
// dtype (activations and matrix units) and the variable dtype (always f32:
// master weights and optimizer state). Layers cast their weights to the
// compute dtype once per step (cached until the weights change), store their
// activations in it, and produce f32 logits; softmax, losses and
// normalisation statistics accumulate in f32 whatever the policy.
//   float32          everything f32
//   mixed_bfloat16   bf16 activations, bf16 matmul/conv (AMX/AVX512-BF16)
//   mixed_float16    f16 activations; matmul/conv in f32 on every device
//                    (oneDNN's f16 kernels need AVX512-FP16 and are not
//                    used), so activations are widened and narrowed around
//                    every layer

#include <string_view>

#include "tandem/nn/models.h"

namespace tandem::precision {

enum class Policy : uint8_t { float32, mixed_bfloat16, mixed_float16 };

std::string_view policy_name(Policy policy);
// "float32", "mixed_bfloat16", "mixed_float16"; throws InvalidArgument naming them.
Policy parse_policy(std::string_view name);

// Activations' dtype under the policy.
DType compute_dtype(Policy policy);
// The matrix units' operand dtype under the policy on this build and CPU.
DType matrix_dtype(Policy policy);

// Model options for a policy (seed and other options taken from `base`). A
// single layer overrides its policy through its own options
// (LinearOptions/Conv2dOptions compute_dtype and output_dtype). The library
// keeps no process-wide policy: each model names its own (Keras's global
// policy is the Python package's, tandem.set_global_policy).
nn::ModelOptions model_options(Policy policy, nn::ModelOptions base = {});

}  // namespace tandem::precision
