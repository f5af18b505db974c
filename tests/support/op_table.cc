#include "support/op_table.h"

#include <cmath>

#include "support/gradcheck.h"
#include "support/op_rows.h"
#include "support/reference.h"
#include "tandem/base/random.h"

namespace tandem::testing {

OpInput uniform(Shape shape, double low, double high) {
  return {.shape = std::move(shape), .low = low, .high = high};
}

OpInput fixed(Shape shape, double low, double high) {
  return {.shape = std::move(shape), .low = low, .high = high, .differentiable = false};
}

OpInput distinct(Shape shape, double margin) {
  return {.shape = std::move(shape), .kind = OpInput::Kind::distinct, .low = margin};
}

OpInput labels(Shape shape, int classes, int ignored) {
  return {.shape = std::move(shape),
          .kind = OpInput::Kind::labels,
          .low = static_cast<double>(ignored),
          .high = static_cast<double>(classes),
          .differentiable = false};
}

OpInput in_f32(OpInput input) {
  input.follows_dtype = false;
  return input;
}

namespace {

// FNV-1a of the row's name.
uint64_t name_seed(const OpCase& op) {
  uint64_t h = 14695981039346656037ull;
  for (const char c : op.name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> rows = [] {
    std::vector<OpCase> all;
    add_dense_rows(all);
    add_pointwise_rows(all);
    add_layout_rows(all);
    add_normalization_rows(all);
    add_loss_rows(all);
    add_update_and_metric_rows(all);
    return all;
  }();
  return rows;
}

std::vector<Variable> op_inputs(const OpCase& op, DType dtype) {
  std::vector<Variable> out;
  for (size_t k = 0; k < op.inputs.size(); ++k) {
    const OpInput& in = op.inputs[k];
    const uint64_t seed = mix_seed(name_seed(op), k);
    Tensor t;
    switch (in.kind) {
      case OpInput::Kind::uniform:
        t = random_tensor(in.shape, static_cast<float>(in.low), static_cast<float>(in.high), seed);
        break;
      case OpInput::Kind::distinct:
        t = distinct_tensor(in.shape, static_cast<float>(in.low), seed);
        break;
      case OpInput::Kind::labels: {
        std::vector<int32_t> values(static_cast<size_t>(in.shape.numel()));
        Generator g(seed);
        const auto classes = static_cast<uint64_t>(in.high);
        for (size_t i = 0; i < values.size(); ++i)
          values[i] = in.low < 0 && i % 3 == 1 ? static_cast<int32_t>(in.low)
                                               : static_cast<int32_t>(g.next_below(classes));
        out.emplace_back(Tensor::from_ints(in.shape, values), false);
        continue;
      }
    }
    t = t.to(dtype);
    if (!in.follows_dtype) t = t.to(DType::f32);
    out.emplace_back(t, in.differentiable && op.gradient);
  }
  return out;
}

std::vector<Doubles> as_doubles(const std::vector<Variable>& inputs) {
  std::vector<Doubles> out;
  out.reserve(inputs.size());
  for (const Variable& v : inputs) out.push_back(to_doubles(v.value()));
  return out;
}

std::vector<Doubles> reference_gradients(const OpCase& op, const std::vector<Doubles>& inputs,
                                         const Doubles& weights) {
  if (op.gradient_reference) return op.gradient_reference(inputs, weights);
  return central_differences(op, inputs, weights);
}

std::vector<Doubles> central_differences(const OpCase& op, const std::vector<Doubles>& inputs,
                                         const Doubles& weights) {
  const auto project = [&](const std::vector<Doubles>& x) {
    const Doubles y = op.reference(x);
    double total = 0;
    for (size_t i = 0; i < y.size(); ++i) total += y[i] * weights[i];
    return total;
  };
  // In double the truncation error of central differences is h^2 times the
  // third derivative and the rounding error 1e-16 / h: both about 1e-10 here.
  constexpr double h = 1e-6;
  std::vector<Doubles> grads(inputs.size());
  if (op.elementwise) {
    Doubles up = inputs[0], down = inputs[0];
    for (size_t j = 0; j < up.size(); ++j) up[j] += h, down[j] -= h;
    const Doubles y_up = op.reference({up}), y_down = op.reference({down});
    grads[0].resize(up.size());
    for (size_t j = 0; j < up.size(); ++j)
      grads[0][j] = weights[j] * (y_up[j] - y_down[j]) / (2 * h);
    return grads;
  }
  if (op.row_length > 0) {
    const auto n = static_cast<size_t>(op.row_length);
    grads[0].resize(inputs[0].size());
    for (size_t r = 0; r < inputs[0].size(); r += n) {
      Doubles row(inputs[0].begin() + r, inputs[0].begin() + r + n);
      for (size_t j = 0; j < n; ++j) {
        const double saved = row[j];
        double up = 0, down = 0;
        row[j] = saved + h;
        const Doubles y_up = op.reference({row});
        row[j] = saved - h;
        const Doubles y_down = op.reference({row});
        row[j] = saved;
        for (size_t i = 0; i < n; ++i)
          up += y_up[i] * weights[r + i], down += y_down[i] * weights[r + i];
        grads[0][r + j] = (up - down) / (2 * h);
      }
    }
    return grads;
  }
  std::vector<Doubles> x = inputs;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!op.inputs[k].differentiable) continue;
    grads[k].resize(x[k].size());
    for (size_t j = 0; j < x[k].size(); ++j) {
      const double saved = x[k][j];
      x[k][j] = saved + h;
      const double up = project(x);
      x[k][j] = saved - h;
      const double down = project(x);
      x[k][j] = saved;
      grads[k][j] = (up - down) / (2 * h);
    }
  }
  return grads;
}

Tensor projection_weights(const OpCase& op, const Shape& shape, DType dtype) {
  return random_tensor(shape, -1, 1, mix_seed(name_seed(op), 1000)).to(dtype);
}

}  // namespace tandem::testing
