#pragma once
// The model's analytic FLOP count per layer: one example through the model,
// the matrix kernels' counts (2 x multiply-adds of every matmul and
// convolution) attributed to the layer that ran them. A training step costs
// three forwards (backward computes the input and the weight gradients) less
// the first layer's input gradient, which nothing needs.

#include <optional>
#include <string>
#include <vector>

#include "tandem/data/element.h"
#include "tandem/nn/module.h"
#include "tandem/tensor/shape.h"

namespace tandem::monitor {

struct LayerFlops {
  std::string layer;           // the child's name in a Sequential ("0", "1", ...), or "model"
  std::string description;     // Module::describe()
  double forward_flops = 0.0;  // per example
};

// Runs one zero example of `example_shape` (without the batch dimension) and
// `dtype` (floating inputs, or i32 tokens: all zeros is a valid token)
// through the model in evaluation mode without gradients, then restores the
// training mode. Layers of a Sequential are listed one by one; any other
// module as one entry. Must not run while other threads use the kernels
// (their FLOPs would be counted too).
std::vector<LayerFlops> layer_flops(nn::Module& model, const Shape& example_shape,
                                    DType dtype = DType::f32);

// layer_flops for one example of the data's `input` feature; none (the
// figure is a diagnostic) without an example, for an input that is neither
// floating nor i32 tokens, or when the model refuses its shape (training
// reports real shape errors).
std::vector<LayerFlops> example_layer_flops(nn::Module& model,
                                            const std::optional<data::Element>& example,
                                            const std::string& input);

}  // namespace tandem::monitor
