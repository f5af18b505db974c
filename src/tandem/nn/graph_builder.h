#pragma once
// A model's inference computation as a graph of standard operators (ONNX's
// operator set, opset 13), which each layer adds itself to through
// Module::to_graph. The builder (interop/onnx_export.cc) owns the format;
// layers only name operators, inputs, attributes and their weights.
//
// Layout: rank-4 values are channels-first (N, C, H, W) inside the graph, as
// ONNX's Conv, pooling and BatchNormalization expect; the exporter
// transposes the model's channels-last input once, and a layer that needs
// tandem's (N, H, W, C) order back (Flatten) transposes where it does.

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "tandem/kernels/activation.h"
#include "tandem/tensor/tensor.h"

namespace tandem::nn {

// A value of the graph: its name and rank.
struct GraphValue {
  std::string name;
  int rank = 0;
};

struct GraphAttribute {
  std::string name;
  std::variant<int64_t, float, std::vector<int64_t>> value;
};

class GraphBuilder {
 public:
  virtual ~GraphBuilder() = default;
  // A node of operator `type` on the inputs (an empty name: an omitted
  // optional input); returns its output, of rank output_rank.
  virtual GraphValue op(const std::string& type, const std::vector<std::string>& inputs,
                        int output_rank, const std::vector<GraphAttribute>& attributes = {}) = 0;
  // A weight of the model as a constant of the graph, named after the
  // parameter or buffer it is (`weight` must share its storage), its axes
  // permuted by `axes` when not empty (kernels::permute's order). Returns its name.
  virtual std::string weight(const Tensor& weight, std::span<const int> axes = {}) = 0;
  // A scalar constant (f32), for composite formulas.
  virtual std::string scalar(float value) = 0;
  // A rank-1 int64 constant: shapes, axes and slice bounds.
  virtual std::string integers(const std::vector<int64_t>& values) = 0;
};

// The operators of an activation after x (none: x itself). Throws
// InvalidArgument for one opset 13 cannot express.
GraphValue activation_to_graph(GraphBuilder& g, const GraphValue& x, kernels::Activation a);

// x (..., T, D) plus the first T rows of a (positions, D) table, T read from
// x's shape when the graph runs (sequences may be shorter than the table).
GraphValue add_position_rows(GraphBuilder& g, const GraphValue& x, const Tensor& table);

// Images are (N, C, H, W) inside an exported graph (ONNX's Conv layout):
// a layer that acts on the last axis (channels in tandem's (N, H, W, C):
// dense, layer_norm) runs on them between these two transposes (on images
// it mixed or normalised along W).
GraphValue to_channels_last(GraphBuilder& g, const GraphValue& images);
GraphValue to_channels_first(GraphBuilder& g, const GraphValue& images);

// x's size along `axis` when the graph runs, as a rank-1 int64 value of one
// element (a Slice bound).
GraphValue size_along(GraphBuilder& g, const GraphValue& x, int axis);

}  // namespace tandem::nn
