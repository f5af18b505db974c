#pragma once
// A decoder-only Transformer (GPT-2's layout): token and learned position
// embeddings, pre-norm blocks of causal self-attention and a GELU (tanh) MLP,
// a final LayerNorm, and logits through the token embedding (weight tying).
// Parameter names follow PyTorch's nanoGPT-style state_dict:
// token_embedding.weight, position_embedding.weight,
// blocks.N.{norm1,attention.qkv,attention.proj,norm2,mlp.fc,mlp.proj}.*, norm.*.
// Initialisation as GPT-2: N(0, 0.02) weights and embeddings, zero biases,
// the residual projections N(0, 0.02 / sqrt(2 * layers)).

#include <cstdint>
#include <memory>
#include <optional>

#include "tandem/base/random.h"
#include "tandem/nn/embedding.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/module.h"
#include "tandem/nn/normalization.h"
#include "tandem/nn/sequential.h"

namespace tandem::nn {

struct GptConfig {
  int64_t vocabulary = 256;  // byte-level tokens
  int64_t context = 128;     // the longest sequence
  int64_t layers = 6;
  int64_t width = 256;
  int64_t heads = 8;
  int64_t mlp_ratio = 4;  // hidden width of the MLP / width
  float dropout = 0.0f;   // on attention probabilities and residual branches
  DType compute_dtype = DType::f32;
  std::optional<DType> activation_dtype;  // between layers (mixed precision)
  bool float32_logits = true;
};

// Throws InvalidArgument naming the setting for sizes that cannot work (a
// width not divisible by the heads, a non-positive size, a dropout outside
// [0, 1)).
void check_gpt_config(const GptConfig& config);

class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(const GptConfig& config, Generator& generator);
  // (B, T, C) -> (B, T, C).
  Variable forward(const Variable& x) override;
  std::string describe() const override;
  // Matrix products, a Softmax and a constant causal mask cut to T.
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;

 private:
  GptConfig config_;
  std::shared_ptr<Linear> qkv_, proj_;
};

// fc (width -> mlp_ratio * width, GELU tanh), proj (back to width).
class Mlp : public Module {
 public:
  Mlp(const GptConfig& config, Generator& generator);
  Variable forward(const Variable& x) override;
  std::string describe() const override;
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;

 private:
  std::shared_ptr<Linear> fc_, proj_;
};

class TransformerBlock : public Module {
 public:
  TransformerBlock(const GptConfig& config, Generator& generator);
  // x + attention(norm1(x)), then + mlp(norm2(.)).
  Variable forward(const Variable& x) override;
  bool recomputable() const override { return true; }
  std::string describe() const override;
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const override;

 private:
  GptConfig config_;
  std::shared_ptr<LayerNorm> norm1_, norm2_;
  std::shared_ptr<CausalSelfAttention> attention_;
  std::shared_ptr<Mlp> mlp_;
};

class Gpt : public Module {
 public:
  Gpt(const GptConfig& config, Generator& generator);
  // i32 tokens (B, T), T <= context, each in [0, vocabulary) -> logits
  // (B, T, vocabulary): position t's prediction of token t + 1. Throws
  // ShapeError for a sequence longer than the context or a bad rank, and
  // InvalidArgument for a token outside the vocabulary.
  Variable forward(const Variable& tokens) override;
  std::string describe() const override;
  // Input: int64 tokens (N, T), T up to the context; output logits (N, T, V).
  GraphValue to_graph(GraphBuilder& graph, const GraphValue& tokens) const override;
  const GptConfig& config() const { return config_; }

 private:
  GptConfig config_;
  std::shared_ptr<Embedding> tokens_, positions_;
  std::shared_ptr<Sequential> blocks_;
  std::shared_ptr<LayerNorm> norm_;
};

}  // namespace tandem::nn
