#include "tandem/nn/transformer.h"

#include <fmt/format.h>
#include <cmath>
#include <vector>

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/nn/graph_builder.h"
#include "tandem/nn/init.h"

namespace tandem::nn {
namespace {

constexpr float kInitStd = 0.02f;

// GPT-2's initialisation of a Linear: N(0, stddev) weight, zero bias.
void gpt_init(const Linear& layer, float stddev, Generator& generator) {
  Tensor w = layer.weight().value();
  init::normal(w, 0.0f, stddev, generator);
  layer.weight().mark_modified();
  if (layer.bias().defined()) {
    Tensor b = layer.bias().value();
    b.zero();
    layer.bias().mark_modified();
  }
}

LinearOptions linear_options(const GptConfig& c, kernels::Activation activation = {}) {
  return {.activation = activation,
          .compute_dtype = c.compute_dtype,
          .output_dtype = c.activation_dtype};
}

Variable residual_dropout(const Variable& x, const GptConfig& c, bool training) {
  return c.dropout > 0.0f ? dropout(x, c.dropout, training, thread_generator()) : x;
}

}  // namespace

void check_gpt_config(const GptConfig& c) {
  // At most 2^31, as a model file's sizes: the products the model forms
  // (mlp_ratio x width, 3 x width, context x context) then stay far from
  // int64's range (mlp_ratio 2^62 + 1 wrapped the MLP to width 4 before).
  static constexpr int64_t kMaxSize = int64_t{1} << 31;
  const auto positive = [](int64_t v, const char* name) {
    if (v <= 0) TANDEM_THROW(InvalidArgument, "gpt: ", name, " must be positive, got ", v);
    if (v > kMaxSize)
      TANDEM_THROW(InvalidArgument, "gpt: ", name, " must be at most ", kMaxSize, ", got ", v);
  };
  positive(c.vocabulary, "vocabulary");
  positive(c.context, "context");
  positive(c.layers, "layers");
  positive(c.width, "width");
  positive(c.heads, "heads");
  positive(c.mlp_ratio, "mlp_ratio");
  if (c.mlp_ratio > kMaxSize / c.width) {
    TANDEM_THROW(InvalidArgument,
                 "gpt: mlp_ratio x width (the MLP's hidden width) must be at most ", kMaxSize,
                 ", got ", c.mlp_ratio, " x ", c.width);
  }
  if (c.width % c.heads != 0) {
    TANDEM_THROW(InvalidArgument, "gpt: width ", c.width, " is not divisible by heads ", c.heads);
  }
  if (!(c.dropout >= 0.0f && c.dropout < 1.0f))
    TANDEM_THROW(InvalidArgument, "gpt: dropout must be in [0, 1), got ", c.dropout);
}

CausalSelfAttention::CausalSelfAttention(const GptConfig& config, Generator& generator)
    : config_(config) {
  qkv_ =
      std::make_shared<Linear>(config.width, 3 * config.width, linear_options(config), generator);
  proj_ = std::make_shared<Linear>(config.width, config.width, linear_options(config), generator);
  gpt_init(*qkv_, kInitStd, generator);
  gpt_init(*proj_, kInitStd / std::sqrt(2.0f * static_cast<float>(config.layers)), generator);
  register_module("qkv", qkv_);
  register_module("proj", proj_);
}

Variable CausalSelfAttention::forward(const Variable& x) {
  const int64_t B = x.shape()[0], T = x.shape()[1], C = config_.width, H = config_.heads;
  // (B, T, 3C) is (B, T, 3, H, D): q, k, v interleaved per position, read
  // in place; the output (B, T, H, D) is (B, T, C).
  const Variable y = attention_interleaved(reshape(qkv_->forward(x), Shape{B, T, 3, H, C / H}),
                                           {.causal = true,
                                            .dropout = config_.dropout,
                                            .training = is_training(),
                                            .compute_dtype = config_.compute_dtype},
                                           &thread_generator());
  return proj_->forward(reshape(y, Shape{B, T, C}));
}

GraphValue CausalSelfAttention::to_graph(GraphBuilder& g, const GraphValue& x) const {
  const int64_t C = config_.width, H = config_.heads, D = C / H;
  const GraphValue qkv = qkv_->to_graph(g, x);  // (N, T, 3C): q, k, v side by side
  const std::string head_shape = g.integers({0, 0, H, D});
  // Third `part` of qkv as heads (N, T, H, D), then axes permuted by `perm`.
  const auto heads = [&](int64_t part, std::vector<int64_t> perm) {
    const GraphValue third =
        g.op("Slice",
             {qkv.name, g.integers({part * C}), g.integers({(part + 1) * C}), g.integers({2})}, 3);
    const GraphValue split = g.op("Reshape", {third.name, head_shape}, 4);
    return g.op("Transpose", {split.name}, 4, {{"perm", std::move(perm)}});
  };
  const GraphValue q = heads(0, {0, 2, 1, 3});  // (N, H, T, D)
  const GraphValue k = heads(1, {0, 2, 3, 1});  // (N, H, D, T)
  const GraphValue v = heads(2, {0, 2, 1, 3});
  const GraphValue scores = g.op(
      "Mul",
      {g.op("MatMul", {q.name, k.name}, 4).name, g.scalar(1.0f / std::sqrt(static_cast<float>(D)))},
      4);
  // Query i sees keys j <= i: a large negative number above the diagonal
  // (exp underflows to exactly 0, as in the fused kernel), cut to (T, T).
  std::vector<float> mask(static_cast<size_t>(config_.context * config_.context), 0.0f);
  for (int64_t i = 0; i < config_.context; ++i)
    for (int64_t j = i + 1; j < config_.context; ++j)
      mask[static_cast<size_t>(i * config_.context + j)] = -1e9f;
  const GraphValue t = size_along(g, x, 1);
  const GraphValue tt = g.op("Concat", {t.name, t.name}, 1, {{"axis", int64_t{0}}});
  const GraphValue causal =
      g.op("Slice",
           {g.weight(Tensor::from_floats(Shape{config_.context, config_.context}, mask)),
            g.integers({0, 0}), tt.name, g.integers({0, 1})},
           2);
  const GraphValue probabilities = g.op(
      "Softmax", {g.op("Add", {scores.name, causal.name}, 4).name}, 4, {{"axis", int64_t{-1}}});
  const GraphValue y = g.op("MatMul", {probabilities.name, v.name}, 4);  // (N, H, T, D)
  const GraphValue rows =
      g.op("Transpose", {y.name}, 4, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  return proj_->to_graph(g, g.op("Reshape", {rows.name, g.integers({0, 0, C})}, 3));
}

std::string CausalSelfAttention::describe() const {
  return fmt::format("CausalSelfAttention({} heads of {})", config_.heads,
                     config_.width / config_.heads);
}

Mlp::Mlp(const GptConfig& config, Generator& generator) {
  const int64_t hidden = config.mlp_ratio * config.width;
  fc_ = std::make_shared<Linear>(config.width, hidden,
                                 linear_options(config, kernels::Activation::gelu_tanh), generator);
  proj_ = std::make_shared<Linear>(hidden, config.width, linear_options(config), generator);
  gpt_init(*fc_, kInitStd, generator);
  gpt_init(*proj_, kInitStd / std::sqrt(2.0f * static_cast<float>(config.layers)), generator);
  register_module("fc", fc_);
  register_module("proj", proj_);
}

Variable Mlp::forward(const Variable& x) {
  return proj_->forward(fc_->forward(x));
}

GraphValue Mlp::to_graph(GraphBuilder& graph, const GraphValue& x) const {
  return proj_->to_graph(graph, fc_->to_graph(graph, x));
}

std::string Mlp::describe() const {
  return "Mlp";
}

TransformerBlock::TransformerBlock(const GptConfig& config, Generator& generator)
    : config_(config) {
  norm1_ = std::make_shared<LayerNorm>(config.width);
  attention_ = std::make_shared<CausalSelfAttention>(config, generator);
  norm2_ = std::make_shared<LayerNorm>(config.width);
  mlp_ = std::make_shared<Mlp>(config, generator);
  register_module("norm1", norm1_);
  register_module("attention", attention_);
  register_module("norm2", norm2_);
  register_module("mlp", mlp_);
}

Variable TransformerBlock::forward(const Variable& x) {
  const bool training = is_training();
  Variable h = add(x, residual_dropout(attention_->forward(norm1_->forward(x)), config_, training));
  return add(h, residual_dropout(mlp_->forward(norm2_->forward(h)), config_, training));
}

GraphValue TransformerBlock::to_graph(GraphBuilder& g, const GraphValue& x) const {
  const GraphValue attended = attention_->to_graph(g, norm1_->to_graph(g, x));
  const GraphValue h = g.op("Add", {x.name, attended.name}, x.rank);
  return g.op("Add", {h.name, mlp_->to_graph(g, norm2_->to_graph(g, h)).name}, x.rank);
}

std::string TransformerBlock::describe() const {
  return fmt::format("TransformerBlock(width {}, mlp {})", config_.width,
                     config_.mlp_ratio * config_.width);
}

Gpt::Gpt(const GptConfig& config, Generator& generator) : config_(config) {
  check_gpt_config(config);
  tokens_ = std::make_shared<Embedding>(config.vocabulary, config.width, generator);
  positions_ = std::make_shared<Embedding>(config.context, config.width, generator);
  for (const auto& table : {tokens_, positions_}) {
    Tensor w = table->weight().value();
    init::normal(w, 0.0f, kInitStd, generator);
    table->weight().mark_modified();
  }
  register_module("token_embedding", tokens_);
  register_module("position_embedding", positions_);
  blocks_ = std::make_shared<Sequential>();
  for (int64_t i = 0; i < config.layers; ++i) blocks_->emplace<TransformerBlock>(config, generator);
  register_module("blocks", blocks_);
  norm_ = std::make_shared<LayerNorm>(config.width);
  register_module("norm", norm_);
}

Variable Gpt::forward(const Variable& tokens) {
  const Tensor& t = tokens.value();
  if (t.rank() != 2 || t.dtype() != DType::i32) {
    TANDEM_THROW(ShapeError, "gpt: input must be i32 tokens (B, T), got ", t.to_string());
  }
  const int64_t T = t.dim(1);
  if (T > config_.context) {
    TANDEM_THROW(ShapeError, "gpt: sequence of ", T, " tokens is longer than the context of ",
                 config_.context);
  }
  std::vector<int32_t> positions(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  Variable x =
      add(tokens_->forward(tokens),
          positions_->forward(Variable(Tensor::from_ints(Shape{T}, positions, t.device()))));
  if (config_.activation_dtype) x = cast(x, *config_.activation_dtype);
  x = residual_dropout(x, config_, is_training());
  x = blocks_->forward(x);
  x = norm_->forward(x);
  // Tied output projection: logits = x . E^T, E the token embedding.
  const std::optional<DType> logits_dtype =
      config_.float32_logits ? std::optional<DType>(DType::f32) : config_.activation_dtype;
  return linear(x, tokens_->weight(), Variable(),
                {.compute_dtype = config_.compute_dtype, .output_dtype = logits_dtype});
}

GraphValue Gpt::to_graph(GraphBuilder& g, const GraphValue& tokens) const {
  if (tokens.rank != 2) {
    TANDEM_THROW(InvalidArgument, "gpt: ONNX export takes tokens (N, T), got rank ", tokens.rank);
  }
  const GraphValue embedded = tokens_->to_graph(g, tokens);
  const GraphValue x = norm_->to_graph(
      g, blocks_->to_graph(g, add_position_rows(g, embedded, positions_->weight().value())));
  const GraphValue table_t = g.op("Transpose", {g.weight(tokens_->weight().value())}, 2,
                                  {{"perm", std::vector<int64_t>{1, 0}}});
  return g.op("MatMul", {x.name, table_t.name}, 3);  // tied output projection
}

std::string Gpt::describe() const {
  return fmt::format("Gpt({} layers, width {}, {} heads, context {}, vocabulary {})",
                     config_.layers, config_.width, config_.heads, config_.context,
                     config_.vocabulary);
}

}  // namespace tandem::nn
