#include "tandem/train/generation.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/random.h"

namespace tandem::train {
namespace {

void check(const LanguageModel& c, std::string_view prompt, const GenerationOptions& o) {
  if (prompt.empty()) TANDEM_THROW(InvalidArgument, "the prompt is empty (give at least one byte)");
  if (static_cast<int64_t>(prompt.size()) > c.context) {
    TANDEM_THROW(InvalidArgument, "the prompt's ", prompt.size(),
                 " bytes are longer than the model's context of ", c.context, " tokens");
  }
  // Tokens are bytes: a sampled id past 255 was truncated to a char.
  if (c.vocabulary < 1 || c.vocabulary > 256) {
    TANDEM_THROW(InvalidArgument, "generation decodes tokens as bytes: the model's vocabulary of ",
                 c.vocabulary, " is not in [1, 256]");
  }
  if (o.tokens < 0) TANDEM_THROW(InvalidArgument, "tokens (--tokens) must be >= 0, got ", o.tokens);
  if (!(o.temperature >= 0.0) || !std::isfinite(o.temperature)) {
    TANDEM_THROW(InvalidArgument,
                 "temperature (--temperature) must be >= 0 and finite (0: greedy), got ",
                 o.temperature);
  }
  if (o.top_k < 0 || o.top_k > c.vocabulary) {
    TANDEM_THROW(InvalidArgument, "top_k (--top-k) must be in [0, ", c.vocabulary,
                 "] (0: all), got ", o.top_k);
  }
  for (const char ch : prompt) {
    if (static_cast<unsigned char>(ch) >= c.vocabulary) {
      TANDEM_THROW(InvalidArgument, "the prompt's byte ",
                   static_cast<int>(static_cast<unsigned char>(ch)),
                   " is outside the model's vocabulary of ", c.vocabulary);
    }
  }
}

// The next token from one row of logits.
int32_t pick(const std::vector<float>& logits, const GenerationOptions& o, Generator& generator) {
  const auto V = static_cast<int64_t>(logits.size());
  if (o.temperature == 0.0)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = o.top_k > 0 ? o.top_k : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const double top = logits[static_cast<size_t>(order[0])];
  std::vector<double> weights(static_cast<size_t>(k));
  double total = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    weights[static_cast<size_t>(i)] = std::exp(
        (logits[static_cast<size_t>(order[static_cast<size_t>(i)])] - top) / o.temperature);
    total += weights[static_cast<size_t>(i)];
  }
  float u = 0.0f;
  generator.uniform(&u, 1);
  double target = static_cast<double>(u) * total;
  for (int64_t i = 0; i < k; ++i) {
    target -= weights[static_cast<size_t>(i)];
    if (target < 0.0) return order[static_cast<size_t>(i)];
  }
  return order[static_cast<size_t>(k - 1)];
}

}  // namespace

std::string generate(nn::Gpt& model, std::string_view prompt, const GenerationOptions& options) {
  return generate({model, model.config().context, model.config().vocabulary}, prompt, options);
}

std::string generate(const LanguageModel& c, std::string_view prompt,
                     const GenerationOptions& options) {
  check(c, prompt, options);
  nn::Module& model = c.model;
  // Sampling mid-training (an epoch callback) leaves the model training.
  const nn::EvalModeScope eval_mode(model);
  NoGradGuard no_grad;
  Generator generator(options.seed);
  std::vector<int32_t> context;
  for (const char ch : prompt) context.push_back(static_cast<unsigned char>(ch));
  std::string out;
  for (int64_t n = 0; n < options.tokens; ++n) {
    // The last `context` tokens (a sliding window once the text is longer).
    const auto T =
        static_cast<int64_t>(std::min<size_t>(context.size(), static_cast<size_t>(c.context)));
    const std::vector<int32_t> window(context.end() - T, context.end());
    const Variable logits = model.forward(Variable(Tensor::from_ints(Shape{1, T}, window)));
    if (logits.shape() != Shape{1, T, c.vocabulary}) {
      TANDEM_THROW(ShapeError, "a language model maps (1, ", T, ") token ids to (1, ", T, ", ",
                   c.vocabulary, ") logits; this one gave ", logits.shape().to_string());
    }
    const std::vector<float> all = logits.value().to(DType::f32).to_floats();
    const std::vector<float> last(all.end() - c.vocabulary, all.end());
    const int32_t next = pick(last, options, generator);
    context.push_back(next);
    out.push_back(static_cast<char>(next));
  }
  return out;
}

}  // namespace tandem::train
