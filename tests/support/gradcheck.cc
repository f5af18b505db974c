#include "support/gradcheck.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tandem/base/random.h"

namespace tandem::testing {
namespace {

double project(const Tensor& out, const std::vector<float>& weights) {
  const std::vector<float> values = out.to_floats();
  double total = 0.0;
  for (size_t i = 0; i < values.size(); ++i) total += static_cast<double>(values[i]) * weights[i];
  return total;
}

}  // namespace

std::vector<uint8_t> storage_bytes(const Tensor& t) {
  if (!t.defined()) return {};
  const auto* p = static_cast<const uint8_t*>(t.raw_data());
  return {p, p + t.nbytes()};
}

Tensor random_tensor(const Shape& shape, float low, float high, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Generator(seed).uniform(t.data<float>(), t.numel(), low, high);
  return t;
}

Tensor distinct_tensor(const Shape& shape, float margin, uint64_t seed) {
  const int64_t n = shape.numel();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  Generator g(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[g.next_below(i + 1)]);
  std::vector<float> values(static_cast<size_t>(n));
  // Evenly spaced magnitudes in [margin, 1], alternating signs.
  for (int64_t i = 0; i < n; ++i) {
    const int64_t rank = order[i];
    const float magnitude =
        margin + (1.0f - margin) * static_cast<float>(rank / 2 + 1) / static_cast<float>(n / 2 + 1);
    values[i] = rank % 2 ? magnitude : -magnitude;
  }
  return Tensor::from_floats(shape, values);
}

void expect_gradients_match(const VariableFunction& f, const std::vector<Variable>& inputs,
                            const GradcheckOptions& options) {
  for (const Variable& v : inputs) {
    if (v.requires_grad()) const_cast<Variable&>(v).zero_grad();
  }
  const Variable out = f(inputs);
  std::vector<float> weights(static_cast<size_t>(out.value().numel()));
  Generator(options.seed)
      .uniform(weights.data(), static_cast<int64_t>(weights.size()), -1.0f, 1.0f);
  out.backward(Tensor::from_floats(out.shape(), weights, out.dtype()));

  for (size_t k = 0; k < inputs.size(); ++k) {
    const Variable& input = inputs[k];
    if (!input.requires_grad()) continue;
    ASSERT_TRUE(input.has_grad()) << "input " << k << " received no gradient";
    const std::vector<float> analytic = input.grad().to_floats();
    Tensor value = input.value();
    float* data = value.data<float>();
    for (int64_t i = 0; i < value.numel(); ++i) {
      const float original = data[i];
      double plus, minus;
      {
        NoGradGuard no_grad;
        data[i] = original + static_cast<float>(options.eps);
        plus = project(f(inputs).value(), weights);
        data[i] = original - static_cast<float>(options.eps);
        minus = project(f(inputs).value(), weights);
        data[i] = original;
      }
      const double numeric = (plus - minus) / (2.0 * options.eps);
      const double a = analytic[static_cast<size_t>(i)];
      EXPECT_LE(std::abs(a - numeric), options.atol + options.rtol * std::abs(numeric))
          << "input " << k << " (" << input.shape().to_string() << ") element " << i
          << ": analytic " << a << " vs numeric " << numeric;
    }
  }
}

}  // namespace tandem::testing
