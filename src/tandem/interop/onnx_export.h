#pragma once
// ONNX export: a model's inference graph (evaluation mode: batch norm from
// its running statistics, dropout the identity) as an ONNX model, opset 13,
// built with Debian's libonnx protobuf classes and checked by
// onnx::checker before it is written.
//
// The graph's input "input" is float32 (N, ...example shape) in tandem's
// layout (channels-last images, (N, H, W, C)), N symbolic, or for token
// models (input dtype i32: gpt, model files with an embedding first) int64
// tokens (N, T), both symbolic, T up to the example's length; its output
// "logits" is float32 (N, classes) or (N, T, vocabulary). Weights are
// initializers named as in torch_state (PyTorch's names; conv weights
// (O, C, KH, KW)).

#include <string>

#include "tandem/nn/module.h"
#include "tandem/tensor/dtype.h"
#include "tandem/tensor/shape.h"

namespace tandem::interop {

inline constexpr int kOnnxOpset = 13;

// The model's ONNX bytes for inputs of `example_shape` (one example, no
// batch dimension); with `any_image_size`, images (H, W, C) of any height
// and width (a model that pools globally: only C is fixed). Throws
// InvalidArgument naming the first layer without an ONNX form, or what the
// checker found.
std::string onnx_model(nn::Module& model, const Shape& example_shape,
                       DType input_dtype = DType::f32, bool any_image_size = false);

// onnx_model written atomically to `path`; IoError when it cannot be.
void export_onnx(nn::Module& model, const Shape& example_shape, DType input_dtype,
                 const std::string& path, bool any_image_size = false);

}  // namespace tandem::interop
