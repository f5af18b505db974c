#pragma once
// Sampling text from a trained byte-level language model (nn::Gpt or a
// model file of the same kind): each new
// token comes from the logits at the last position of the (at most context)
// tokens so far: the most likely one (temperature 0, greedy) or a draw from
// softmax(logits / temperature), optionally over the top_k most likely,
// from a seeded generator (the same seed gives the same text).

#include <cstdint>
#include <string>
#include <string_view>

#include "tandem/nn/transformer.h"

namespace tandem::train {

struct GenerationOptions {
  int64_t tokens = 200;      // new tokens, >= 0
  double temperature = 1.0;  // >= 0 and finite; 0: greedy
  int64_t top_k = 0;         // 0: every token; else 1..vocabulary
  uint64_t seed = 0;
};

// Any model that maps token ids (1, T), T <= context, to logits
// (1, T, vocabulary) with causal attention (the built-in gpt, or a model
// file of embeddings and attention).
struct LanguageModel {
  nn::Module& model;
  int64_t context;
  int64_t vocabulary;
};

// Throws InvalidArgument for an empty prompt or one longer than the model's
// context, a token count < 0, a temperature < 0 or not finite, or a top_k
// outside [0, vocabulary]; and for a prompt byte outside the vocabulary.
// Returns the new bytes only (the prompt is not repeated).
std::string generate(const LanguageModel& model, std::string_view prompt,
                     const GenerationOptions& options);
std::string generate(nn::Gpt& model, std::string_view prompt, const GenerationOptions& options);

}  // namespace tandem::train
