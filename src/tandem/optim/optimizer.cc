#include "tandem/optim/optimizer.h"

#include "tandem/optim/layerwise.h"

#include "tandem/kernels/elementwise.h"
#include "tandem/kernels/optimizer_update.h"
#include "tandem/kernels/reduce.h"

#include <cmath>

#include "tandem/base/error.h"
#include "tandem/base/name_table.h"

namespace tandem::optim {
namespace {

void check_finite_non_negative(double value, const char* what) {
  if (!(value >= 0.0) || !std::isfinite(value)) {
    TANDEM_THROW(InvalidArgument, what, " must be a finite non-negative number, got ", value);
  }
}

}  // namespace

Optimizer::Optimizer(std::vector<Variable> parameters, double learning_rate)
    : parameters_(std::move(parameters)), learning_rate_(learning_rate) {
  check_finite_non_negative(learning_rate, "learning rate");
  for (const Variable& p : parameters_) {
    if (!p.defined() || p.dtype() != DType::f32) {
      TANDEM_THROW(InvalidArgument, "optimizer parameters must be f32 variables, got '",
                   p.defined() ? p.name() : "undefined", "'");
    }
  }
  // Step counts are the host's bookkeeping, wherever the parameters live.
  update_counts_ = Tensor::zeros(Shape{static_cast<int64_t>(parameters_.size())}, DType::i32,
                                 cpu_device(), MemoryCategory::optimizer_state);
}

void Optimizer::zero_grad() {
  for (Variable& p : parameters_) p.zero_grad();
}

void Optimizer::set_learning_rate(double learning_rate) {
  check_finite_non_negative(learning_rate, "learning rate");
  learning_rate_ = learning_rate;
}

Tensor& Optimizer::add_state(size_t parameter, const std::string& slot) {
  const Tensor& value = parameters_.at(parameter).value();
  state_.emplace_back(
      std::to_string(parameter) + "." + slot,
      std::make_unique<Tensor>(Tensor::zeros(value.shape(), DType::f32, value.device(),
                                             MemoryCategory::optimizer_state)));
  return *state_.back().second;
}

std::vector<std::pair<std::string, Tensor*>> Optimizer::state() {
  std::vector<std::pair<std::string, Tensor*>> out{{"updates", &update_counts_}};
  for (auto& [name, tensor] : state_) out.emplace_back(name, tensor.get());
  return out;
}

Sgd::Sgd(std::vector<Variable> parameters, double learning_rate, const SgdOptions& options)
    : Optimizer(std::move(parameters), learning_rate), options_(options) {
  check_finite_non_negative(options.momentum, "SGD momentum");
  check_finite_non_negative(options.dampening, "SGD dampening");
  check_finite_non_negative(options.weight_decay, "SGD weight decay");
  if (options.nesterov && (options.momentum <= 0.0 || options.dampening != 0.0)) {
    TANDEM_THROW(InvalidArgument, "Nesterov momentum needs momentum > 0 and zero dampening");
  }
  if (options.momentum > 0.0) {
    for (size_t i = 0; i < this->parameters().size(); ++i)
      momentum_.push_back(&add_state(i, "momentum"));
  }
}

void Sgd::step() {
  const auto lr = static_cast<float>(learning_rate());
  const auto momentum = static_cast<float>(options_.momentum);
  const auto dampening = static_cast<float>(options_.dampening);
  const auto decay = static_cast<float>(options_.weight_decay);
  const bool nesterov = options_.nesterov;
  for (size_t i = 0; i < parameters().size(); ++i) {
    const Variable& param = parameters()[i];
    if (!param.has_grad()) continue;
    const kernels::SgdUpdate step{.lr = lr,
                                  .momentum = momentum,
                                  .dampening = dampening,
                                  .decay = decay,
                                  .first = updates(i) == 0,
                                  .nesterov = nesterov};
    kernels::sgd_update(param.value(), param.grad(), momentum > 0.0f ? *momentum_[i] : Tensor(),
                        step);
    param.mark_modified();
    ++updates(i);
  }
}

Adam::Adam(std::vector<Variable> parameters, double learning_rate, const AdamOptions& options)
    : Optimizer(std::move(parameters), learning_rate), options_(options) {
  if (!(options.beta1 >= 0.0 && options.beta1 < 1.0) ||
      !(options.beta2 >= 0.0 && options.beta2 < 1.0)) {
    TANDEM_THROW(InvalidArgument, "Adam betas must be in [0, 1), got ", options.beta1, " and ",
                 options.beta2);
  }
  if (!(options.eps > 0.0))
    TANDEM_THROW(InvalidArgument, "Adam eps must be positive, got ", options.eps);
  check_finite_non_negative(options.weight_decay, "Adam weight decay");
  for (size_t i = 0; i < this->parameters().size(); ++i) {
    first_moment_.push_back(&add_state(i, "exp_avg"));
    second_moment_.push_back(&add_state(i, "exp_avg_sq"));
  }
}

void Adam::step() {
  const double lr = learning_rate();
  const auto b1 = static_cast<float>(options_.beta1);
  const auto b2 = static_cast<float>(options_.beta2);
  const auto eps = static_cast<float>(options_.eps);
  const bool decoupled = options_.decoupled_weight_decay;
  const auto l2 = static_cast<float>(decoupled ? 0.0 : options_.weight_decay);
  const auto shrink = static_cast<float>(decoupled ? 1.0 - lr * options_.weight_decay : 1.0);
  for (size_t i = 0; i < parameters().size(); ++i) {
    const Variable& param = parameters()[i];
    if (!param.has_grad()) continue;
    const int32_t t = updates(i) + 1;  // counted once the update is made
    const double correction1 = 1.0 - std::pow(options_.beta1, t);
    const auto step_size = static_cast<float>(lr / correction1);
    const auto inv_sqrt_correction2 =
        static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(options_.beta2, t)));
    const kernels::AdamUpdate step{.b1 = b1,
                                   .b2 = b2,
                                   .eps = eps,
                                   .l2 = l2,
                                   .shrink = shrink,
                                   .step_size = step_size,
                                   .inv_sqrt_correction2 = inv_sqrt_correction2};
    kernels::adam_update(param.value(), param.grad(), *first_moment_[i], *second_moment_[i], step);
    param.mark_modified();
    updates(i) = t;
  }
}

namespace {

constexpr NameTable<OptimizerKind, 5> kOptimizers{"optimizer",
                                                  {{{OptimizerKind::sgd, "sgd"},
                                                    {OptimizerKind::adam, "adam"},
                                                    {OptimizerKind::adamw, "adamw"},
                                                    {OptimizerKind::lars, "lars"},
                                                    {OptimizerKind::lamb, "lamb"}}}};

// In [0, 1): a decay rate of a running average (momentum, Adam's betas).
bool is_decay_rate(double value) {
  return value >= 0.0 && value < 1.0;
}

}  // namespace

std::string_view optimizer_name(OptimizerKind kind) {
  return kOptimizers.name(kind);
}

OptimizerKind parse_optimizer(std::string_view name) {
  return kOptimizers.parse(name);
}

double default_learning_rate(OptimizerKind kind) {
  return kind == OptimizerKind::sgd ? 0.05 : kind == OptimizerKind::lars ? 1.0 : 1e-3;
}

void check_optimizer_config(const OptimizerConfig& c) {
  const std::string_view name = optimizer_name(c.kind);  // refuses a value outside the enum
  if (!(c.learning_rate > 0.0) || !std::isfinite(c.learning_rate)) {
    TANDEM_THROW(InvalidArgument, name, " learning rate must be positive and finite, got ",
                 c.learning_rate);
  }
  if (c.weight_decay && (!(*c.weight_decay >= 0.0) || !std::isfinite(*c.weight_decay))) {
    TANDEM_THROW(InvalidArgument, name, " weight decay must be >= 0 and finite, got ",
                 *c.weight_decay);
  }
  if (!(c.global_clip_norm >= 0.0) || !std::isfinite(c.global_clip_norm)) {
    TANDEM_THROW(InvalidArgument, "gradient clip norm must be >= 0 and finite (0: off), got ",
                 c.global_clip_norm);
  }
  if (c.kind == OptimizerKind::sgd || c.kind == OptimizerKind::lars) {
    // Momentum 1 or more makes the update a growing sum of every gradient
    // so far: the weights diverge.
    if (!is_decay_rate(c.momentum))
      TANDEM_THROW(InvalidArgument, name, " momentum must be in [0, 1), got ", c.momentum);
    if (c.kind == OptimizerKind::lars &&
        (!(c.trust_coefficient > 0.0) || !std::isfinite(c.trust_coefficient))) {
      TANDEM_THROW(InvalidArgument, "lars trust coefficient must be positive and finite, got ",
                   c.trust_coefficient);
    }
    return;
  }
  if (!is_decay_rate(c.beta1) || !is_decay_rate(c.beta2)) {
    TANDEM_THROW(InvalidArgument, name, " beta1 and beta2 must be in [0, 1), got ", c.beta1,
                 " and ", c.beta2);
  }
  const double eps = eps_of(c);
  if (!(eps > 0.0) || !std::isfinite(eps))
    TANDEM_THROW(InvalidArgument, name, " eps must be positive and finite, got ", eps);
}

double eps_of(const OptimizerConfig& config) {
  return config.eps.value_or(config.kind == OptimizerKind::lamb ? LambOptions{}.eps
                                                                : AdamOptions{}.eps);
}

double gradient_squares(const std::vector<Variable>& parameters) {
  double squares = 0.0;
  for (const Variable& p : parameters)
    if (p.has_grad()) squares += kernels::squared_norm(p.grad());
  return squares;
}

double clip_to_norm(const std::vector<Variable>& parameters, double norm, double max_norm) {
  if (!(max_norm > 0.0))
    TANDEM_THROW(InvalidArgument, "clip_grad_norm: max_norm must be positive, got ", max_norm);
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  const auto factor = static_cast<float>(max_norm / norm);
  for (const Variable& p : parameters) {
    if (!p.has_grad()) continue;
    Tensor g = p.grad();
    g.copy_from(kernels::scale(g, factor));
  }
  return norm;
}

double clip_grad_norm(const std::vector<Variable>& parameters, double max_norm) {
  if (!(max_norm > 0.0))
    TANDEM_THROW(InvalidArgument, "clip_grad_norm: max_norm must be positive, got ", max_norm);
  return clip_to_norm(parameters, std::sqrt(gradient_squares(parameters)), max_norm);
}

std::vector<std::string> state_slots(const OptimizerConfig& config) {
  if (config.kind == OptimizerKind::sgd)
    return config.momentum > 0.0 ? std::vector<std::string>{"momentum"}
                                 : std::vector<std::string>{};
  if (config.kind == OptimizerKind::lars) return {"momentum"};
  return {"exp_avg", "exp_avg_sq"};  // adam, adamw, lamb
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config,
                                          std::vector<Variable> parameters) {
  check_optimizer_config(config);
  if (config.kind == OptimizerKind::sgd) {
    return std::make_unique<Sgd>(std::move(parameters), config.learning_rate,
                                 SgdOptions{.momentum = config.momentum,
                                            .weight_decay = config.weight_decay.value_or(0.0),
                                            .nesterov = config.nesterov});
  }
  if (config.kind == OptimizerKind::lars) {
    return std::make_unique<Lars>(std::move(parameters), config.learning_rate,
                                  LarsOptions{.momentum = config.momentum,
                                              .weight_decay = config.weight_decay.value_or(0.0),
                                              .trust_coefficient = config.trust_coefficient});
  }
  if (config.kind == OptimizerKind::lamb) {
    return std::make_unique<Lamb>(std::move(parameters), config.learning_rate,
                                  LambOptions{.beta1 = config.beta1,
                                              .beta2 = config.beta2,
                                              .eps = eps_of(config),
                                              .weight_decay = config.weight_decay.value_or(0.01)});
  }
  // adam and adamw
  const bool decoupled = config.kind == OptimizerKind::adamw;
  const double decay = config.weight_decay.value_or(decoupled ? 0.01 : 0.0);
  return std::make_unique<Adam>(std::move(parameters), config.learning_rate,
                                AdamOptions{.beta1 = config.beta1,
                                            .beta2 = config.beta2,
                                            .eps = eps_of(config),
                                            .weight_decay = decay,
                                            .decoupled_weight_decay = decoupled});
}

}  // namespace tandem::optim
