#pragma once
// Models defined in TOML files (docs/model_files.md): a declared per-example
// input and a list of Keras-like layers. parse_model_definition checks the
// whole file (keys, value types, sizes, and the shape through every layer),
// so build_model does not fail on a definition it returned. Every error
// names the file, the line and the layer.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/kernels/activation.h"
#include "tandem/nn/models.h"
#include "tandem/nn/sequential.h"

namespace tandem::nn {

// A model file's layer types, by their names in the file ("dense", ...).
enum class LayerKind : uint8_t {
  dense,               // Linear
  conv2d,              // Conv2d
  max_pool2d,          // MaxPool2d
  batch_norm,          // BatchNorm2d over the last dimension
  layer_norm,          // LayerNorm over the last dimension
  dropout,             // Dropout
  flatten,             // Flatten
  embedding,           // Embedding
  activation,          // ReLU, GELU, GELUTanh or SiLU
  residual,            // Residual
  avg_pool2d,          // AvgPool2d
  global_avg_pool,     // GlobalAvgPool
  position_embedding,  // PositionEmbedding
  attention,           // CausalSelfAttention
};

std::string_view layer_kind_name(LayerKind kind);
// Every layer type's name, in LayerKind order.
std::vector<std::string_view> layer_kind_names();
// The keys a layer table of that kind may hold besides "type", in the order
// docs/model_files.md lists them.
std::vector<std::string_view> layer_keys(LayerKind kind);

// One layer of a model file with its settings resolved (defaults filled in,
// padding "same"/"valid" turned into a count) and its shapes inferred. Sizes
// are element counts; shapes are per example (no batch dimension).
struct LayerDefinition {
  LayerKind kind = LayerKind::dense;
  // Its module's name in the built model: "3", or "6.0" for the first layer
  // of the residual block at index 6 (parameters are then "6.0.weight").
  std::string path;
  int64_t line = 0;  // where its table starts in the file (1-based)
  std::vector<int64_t> input_shape, output_shape;

  int64_t units = 0;       // dense: units; conv2d: filters; embedding: dim
  int64_t kernel = 0;      // conv2d: kernel size; max_pool2d, avg_pool2d: window size
  int64_t stride = 1;      // conv2d, max_pool2d, avg_pool2d
  int64_t padding = 0;     // conv2d: zeros on each side
  int64_t vocabulary = 0;  // embedding
  int64_t heads = 0;       // attention
  // dense, conv2d, activation; batch_norm (relu) and residual: after the layer
  kernels::Activation activation = kernels::Activation::none;
  bool bias = true;                       // dense, conv2d
  float rate = 0.0f;                      // dropout, attention
  float eps = 1e-5f;                      // batch_norm, layer_norm
  float momentum = 0.1f;                  // batch_norm
  bool synchronized = false;              // batch_norm
  bool recompute = false;                 // residual
  std::vector<LayerDefinition> layers;    // residual
  std::vector<LayerDefinition> shortcut;  // residual (empty: identity)

  bool operator==(const LayerDefinition&) const = default;
};

// A parsed and checked model file: the declared input and the layers, not
// yet built.
struct ModelDefinition {
  std::string name;                  // `name`, or the file's stem
  std::vector<int64_t> input_shape;  // per example, e.g. (28, 28, 1) or (T)
  DType input_dtype = DType::f32;    // f32, or i32 token ids for an embedding
  std::vector<LayerDefinition> layers;

  // The per-example output shape after the last layer.
  std::vector<int64_t> output_shape() const;

  bool operator==(const ModelDefinition&) const = default;
};

// Parses and checks a model file's text; `source` names it in errors
// ("model.toml") and its stem is the default name. Throws InvalidArgument
// "model.toml:12: layer 3 (dense): ..." for invalid TOML, an unknown or
// missing key, a value of the wrong type or range, an unknown layer type, or
// a layer that does not fit its input's shape (problems with the whole file,
// such as a missing input_shape, name the file without a line).
ModelDefinition parse_model_definition(std::string_view text, std::string_view source);

// Builds the model as make_model builds the built-ins: one generator seeded
// with options.seed, consumed by the layers in file order (depth first);
// dense and conv2d layers compute in options.compute_dtype and produce
// options.activation_dtype, except the model's last dense/conv2d layer, which
// produces last_layer_output_dtype(options) (the layers after it keep that
// dtype). Throws InvalidArgument for bad options (check_model_options).
std::shared_ptr<Sequential> build_model(const ModelDefinition& definition,
                                        const ModelOptions& options = {});

}  // namespace tandem::nn
