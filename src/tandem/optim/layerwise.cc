#include "tandem/optim/layerwise.h"

#include <cmath>

#include "tandem/base/error.h"

namespace tandem::optim {
namespace {

// Sums in double: the norms decide the step size of a whole layer.
double norm_of(const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return std::sqrt(s);
}

void check_non_negative(double value, const char* what) {
  if (!(value >= 0.0) || !std::isfinite(value))
    TANDEM_THROW(InvalidArgument, what, " must be a finite non-negative number, got ", value);
}

}  // namespace

bool layerwise_adapted(const Variable& parameter) {
  return parameter.shape().rank() >= 2;
}

Lars::Lars(std::vector<Variable> parameters, double learning_rate, const LarsOptions& options)
    : Optimizer(std::move(parameters), learning_rate), options_(options) {
  if (!(options.momentum >= 0.0 && options.momentum < 1.0))
    TANDEM_THROW(InvalidArgument, "LARS momentum must be in [0, 1), got ", options.momentum);
  check_non_negative(options.weight_decay, "LARS weight decay");
  if (!(options.trust_coefficient > 0.0) || !std::isfinite(options.trust_coefficient)) {
    TANDEM_THROW(InvalidArgument, "LARS trust coefficient must be positive and finite, got ",
                 options.trust_coefficient);
  }
  for (size_t i = 0; i < this->parameters().size(); ++i)
    momentum_.push_back(&add_state(i, "momentum"));
}

void Lars::step() {
  const double lr = learning_rate();
  const auto m = static_cast<float>(options_.momentum);
  for (size_t i = 0; i < parameters().size(); ++i) {
    const Variable& p = parameters()[i];
    if (!p.has_grad()) continue;
    const Tensor g = p.grad();
    float* w = p.value().data<float>();
    const float* gv = g.data<float>();
    float* v = momentum_[i]->data<float>();
    const int64_t n = p.value().numel();
    const bool adapted = layerwise_adapted(p);
    const double decay = adapted ? options_.weight_decay : 0.0;
    double local = 1.0;
    if (adapted) {
      const double w_norm = norm_of(w, n), g_norm = norm_of(gv, n);
      if (w_norm > 0.0 && g_norm > 0.0)
        local = options_.trust_coefficient * w_norm / (g_norm + decay * w_norm);
    }
    const auto scale = static_cast<float>(lr * local);
    const auto b = static_cast<float>(decay);
    for (int64_t j = 0; j < n; ++j) {
      v[j] = m * v[j] + scale * (gv[j] + b * w[j]);
      w[j] -= v[j];
    }
    p.mark_modified();
    ++updates(i);
  }
}

Lamb::Lamb(std::vector<Variable> parameters, double learning_rate, const LambOptions& options)
    : Optimizer(std::move(parameters), learning_rate), options_(options) {
  if (!(options.beta1 >= 0.0 && options.beta1 < 1.0) ||
      !(options.beta2 >= 0.0 && options.beta2 < 1.0)) {
    TANDEM_THROW(InvalidArgument, "LAMB betas must be in [0, 1), got ", options.beta1, " and ",
                 options.beta2);
  }
  if (!(options.eps > 0.0) || !std::isfinite(options.eps))
    TANDEM_THROW(InvalidArgument, "LAMB eps must be positive and finite, got ", options.eps);
  check_non_negative(options.weight_decay, "LAMB weight decay");
  for (size_t i = 0; i < this->parameters().size(); ++i) {
    first_moment_.push_back(&add_state(i, "exp_avg"));
    second_moment_.push_back(&add_state(i, "exp_avg_sq"));
  }
}

void Lamb::step() {
  const double lr = learning_rate();
  const auto b1 = static_cast<float>(options_.beta1);
  const auto b2 = static_cast<float>(options_.beta2);
  const auto eps = static_cast<float>(options_.eps);
  for (size_t i = 0; i < parameters().size(); ++i) {
    const Variable& p = parameters()[i];
    if (!p.has_grad()) continue;
    const int32_t t = updates(i) + 1;  // counted once the update is made
    const auto c1 = static_cast<float>(1.0 / (1.0 - std::pow(options_.beta1, t)));
    const auto c2 = static_cast<float>(1.0 / (1.0 - std::pow(options_.beta2, t)));
    const Tensor g = p.grad();
    float* w = p.value().data<float>();
    const float* gv = g.data<float>();
    float* m = first_moment_[i]->data<float>();
    float* v = second_moment_[i]->data<float>();
    const int64_t n = p.value().numel();
    const bool adapted = layerwise_adapted(p);
    const auto decay = static_cast<float>(adapted ? options_.weight_decay : 0.0);
    // The update direction, into a buffer: its norm is needed before the step.
    Tensor u = Tensor::empty(p.shape(), DType::f32, p.value().device(), MemoryCategory::workspace);
    float* uv = u.data<float>();
    for (int64_t j = 0; j < n; ++j) {
      m[j] = b1 * m[j] + (1.0f - b1) * gv[j];
      v[j] = b2 * v[j] + (1.0f - b2) * gv[j] * gv[j];
      uv[j] = (m[j] * c1) / (std::sqrt(v[j] * c2) + eps) + decay * w[j];
    }
    double ratio = 1.0;
    if (adapted) {
      const double w_norm = norm_of(w, n), u_norm = norm_of(uv, n);
      if (w_norm > 0.0 && u_norm > 0.0) ratio = w_norm / u_norm;
    }
    const auto step_size = static_cast<float>(lr * ratio);
    for (int64_t j = 0; j < n; ++j) w[j] -= step_size * uv[j];
    p.mark_modified();
    updates(i) = t;
  }
}

}  // namespace tandem::optim
