// Model files: the modules a parsed definition describes (model_file.cc
// parses and checks it).
#include "tandem/base/error.h"
#include "tandem/nn/activation.h"
#include "tandem/nn/conv.h"
#include "tandem/nn/dropout.h"
#include "tandem/nn/embedding.h"
#include "tandem/nn/flatten.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/model_file.h"
#include "tandem/nn/normalization.h"
#include "tandem/nn/residual.h"
#include "tandem/nn/transformer.h"

namespace tandem::nn {
namespace {

// The last dense/conv2d layer in depth-first build order (a residual
// block's layers, then its shortcut): the one producing the logits.
const LayerDefinition* last_matrix_layer(const std::vector<LayerDefinition>& layers) {
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    if (it->kind == LayerKind::dense || it->kind == LayerKind::conv2d) return &*it;
    if (it->kind == LayerKind::residual) {
      for (const auto* path : {&it->shortcut, &it->layers})
        if (const LayerDefinition* inner = last_matrix_layer(*path)) return inner;
    }
  }
  return nullptr;
}

struct Builder {
  const ModelOptions& options;
  Generator& generator;
  const LayerDefinition* last_matrix;

  std::shared_ptr<Module> build(const LayerDefinition& d) const {
    const std::optional<DType> output_dtype =
        &d == last_matrix ? last_layer_output_dtype(options) : options.activation_dtype;
    switch (d.kind) {
      case LayerKind::dense:
        return std::make_shared<Linear>(d.input_shape.back(), d.units,
                                        LinearOptions{.bias = d.bias,
                                                      .activation = d.activation,
                                                      .compute_dtype = options.compute_dtype,
                                                      .output_dtype = output_dtype},
                                        generator);
      case LayerKind::conv2d:
        return std::make_shared<Conv2d>(d.input_shape[2], d.units, d.kernel,
                                        Conv2dOptions{.stride = d.stride,
                                                      .padding = d.padding,
                                                      .bias = d.bias,
                                                      .activation = d.activation,
                                                      .compute_dtype = options.compute_dtype,
                                                      .output_dtype = output_dtype},
                                        generator);
      case LayerKind::max_pool2d:
        return std::make_shared<MaxPool2d>(d.kernel, d.stride);
      case LayerKind::batch_norm:
        return std::make_shared<BatchNorm2d>(d.input_shape.back(), d.eps, d.momentum,
                                             d.synchronized,
                                             d.activation == kernels::Activation::relu);
      case LayerKind::layer_norm:
        return std::make_shared<LayerNorm>(d.input_shape.back(), d.eps);
      case LayerKind::dropout:
        return std::make_shared<Dropout>(d.rate);
      case LayerKind::flatten:
        return std::make_shared<Flatten>();
      case LayerKind::embedding:
        return std::make_shared<Embedding>(d.vocabulary, d.units, generator);
      case LayerKind::activation:
        switch (d.activation) {
          case kernels::Activation::gelu:
            return std::make_shared<GELU>();
          case kernels::Activation::gelu_tanh:
            return std::make_shared<GELUTanh>();
          case kernels::Activation::silu:
            return std::make_shared<SiLU>();
          default:
            return std::make_shared<ReLU>();
        }
      case LayerKind::residual: {
        std::vector<std::shared_ptr<Module>> body, shortcut;
        for (const LayerDefinition& inner : d.layers) body.push_back(build(inner));
        for (const LayerDefinition& inner : d.shortcut) shortcut.push_back(build(inner));
        auto block = std::make_shared<Residual>(std::move(body), std::move(shortcut), d.activation);
        block->set_recompute(d.recompute);
        return block;
      }
      case LayerKind::avg_pool2d:
        return std::make_shared<AvgPool2d>(d.kernel, d.stride);
      case LayerKind::global_avg_pool:
        return std::make_shared<GlobalAvgPool>();
      case LayerKind::position_embedding:
        return std::make_shared<PositionEmbedding>(d.input_shape[0], d.input_shape[1], generator);
      case LayerKind::attention: {
        // One block's worth of GPT-2 initialisation (the output projection
        // scaled by 1 / sqrt(2)).
        const GptConfig config{.context = d.input_shape[0],
                               .layers = 1,
                               .width = d.input_shape[1],
                               .heads = d.heads,
                               .dropout = d.rate,
                               .compute_dtype = options.compute_dtype,
                               .activation_dtype = options.activation_dtype};
        return std::make_shared<CausalSelfAttention>(config, generator);
      }
    }
    TANDEM_THROW(Error, "unhandled layer kind ", static_cast<int>(d.kind));
  }
};

}  // namespace

std::shared_ptr<Sequential> build_model(const ModelDefinition& definition,
                                        const ModelOptions& options) {
  check_model_options(options);
  Generator generator(options.seed);
  const Builder builder{.options = options,
                        .generator = generator,
                        .last_matrix = last_matrix_layer(definition.layers)};
  auto model = std::make_shared<Sequential>();
  for (const LayerDefinition& layer : definition.layers) model->add(builder.build(layer));
  return model;
}

}  // namespace tandem::nn
