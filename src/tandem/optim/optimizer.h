#pragma once
// Optimizers update Parameters (f32 master weights) from their accumulated
// gradients, in place. Parameters without a gradient this step are skipped,
// their state untouched. State tensors live in the optimizer_state memory
// category and are exposed by name for checkpoints.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/autograd/variable.h"

namespace tandem::optim {

class Optimizer {
 public:
  // Throws InvalidArgument for a negative or non-finite learning rate, or a
  // parameter that is not f32.
  Optimizer(std::vector<Variable> parameters, double learning_rate);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update with the current learning rate. Not thread-safe.
  virtual void step() = 0;
  virtual std::string name() const = 0;

  void zero_grad();
  double learning_rate() const { return learning_rate_; }
  void set_learning_rate(double learning_rate);
  const std::vector<Variable>& parameters() const { return parameters_; }

  // Every state tensor, named "<parameter index>.<slot>" (e.g. "3.momentum"),
  // in a fixed order; checkpoints save and restore through these pointers.
  std::vector<std::pair<std::string, Tensor*>> state();

 protected:
  // A zero-initialised f32 state tensor shaped like parameter i.
  Tensor& add_state(size_t parameter, const std::string& slot);
  // Per-parameter update counts (i32), also part of state().
  int32_t& updates(size_t parameter) { return update_counts_.data<int32_t>()[parameter]; }

 private:
  std::vector<Variable> parameters_;
  double learning_rate_;
  Tensor update_counts_;
  std::vector<std::pair<std::string, std::unique_ptr<Tensor>>> state_;
};

struct SgdOptions {
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  // L2, added to the gradient
  bool nesterov = false;
};

// SGD with PyTorch's semantics: the first update sets the momentum buffer to
// the gradient.
class Sgd : public Optimizer {
 public:
  Sgd(std::vector<Variable> parameters, double learning_rate, const SgdOptions& options = {});
  void step() override;
  std::string name() const override { return "sgd"; }

 private:
  SgdOptions options_;
  std::vector<Tensor*> momentum_;
};

struct AdamOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // true: AdamW
};

// Adam (L2 weight decay in the gradient) or AdamW (decoupled decay), with
// bias correction, as PyTorch.
class Adam : public Optimizer {
 public:
  Adam(std::vector<Variable> parameters, double learning_rate, const AdamOptions& options = {});
  void step() override;
  std::string name() const override { return options_.decoupled_weight_decay ? "adamw" : "adam"; }

 private:
  AdamOptions options_;
  std::vector<Tensor*> first_moment_, second_moment_;
};

enum class OptimizerKind : uint8_t { sgd, adam, adamw, lars, lamb };  // lars, lamb: layerwise.h

// "sgd", "adam", "adamw", "lars", "lamb"; parse_optimizer throws
// InvalidArgument naming the accepted ones.
std::string_view optimizer_name(OptimizerKind kind);
OptimizerKind parse_optimizer(std::string_view name);

// The learning rate is explicit here (the recipe's 0.05 for SGD by default);
// `tandem train` without --lr takes default_learning_rate(kind) instead.
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::sgd;
  double learning_rate = 0.05;       // > 0, finite
  double momentum = 0.9;             // sgd, lars; in [0, 1)
  bool nesterov = false;             // sgd
  double trust_coefficient = 0.001;  // lars: eta, > 0
  // Unset: PyTorch's default (0 for sgd, adam and lars, 0.01 for adamw and
  // lamb); >= 0.
  std::optional<double> weight_decay;
  double beta1 = 0.9, beta2 = 0.999;  // adam, adamw, lamb; in [0, 1)
  // adam, adamw, lamb; > 0, finite. Unset: 1e-8 for adam and adamw
  // (PyTorch's), 1e-6 for lamb (the paper's, as TensorFlow Addons' and
  // apex's, and LambOptions').
  std::optional<double> eps;
  // > 0: before each update, scale the gradients so that their global L2
  // norm (over every parameter) is at most this (Keras's global_clipnorm,
  // PyTorch's clip_grad_norm_). The step engine applies it to the reduced,
  // unscaled gradients, so it is the same on every replica. 0: off.
  double global_clip_norm = 0.0;
};

// The global L2 norm of the parameters' gradients (accumulated in double);
// when it exceeds max_norm (> 0), every gradient is scaled by
// max_norm / norm. Returns the norm before clipping (NaN or inf when a
// gradient is not finite: then nothing is scaled).
double clip_grad_norm(const std::vector<Variable>& parameters, double max_norm);
// clip_grad_norm's two halves, for gradients spread over replicas (ZeRO's
// shards): the sum of the squared gradient elements (in double), and the
// scaling given the global norm (returns it; scales nothing when it is not
// finite or at most max_norm).
double gradient_squares(const std::vector<Variable>& parameters);
double clip_to_norm(const std::vector<Variable>& parameters, double norm, double max_norm);

// The learning rate an optimizer starts from when none is given: 0.05 for
// sgd (the project's recipe), 1e-3 for adam, adamw and lamb (PyTorch's and
// Keras's default), 1 for lars (its trust ratio, eta ||w|| / ||g||, is
// small: the paper's rates are of order 1 to 10).
double default_learning_rate(OptimizerKind kind);
// config.eps, or the kind's default when it is unset.
double eps_of(const OptimizerConfig& config);

// Throws InvalidArgument naming the first field of `config` outside its
// range (see OptimizerConfig).
void check_optimizer_config(const OptimizerConfig& config);

// The f32 state tensors an optimizer of this configuration keeps per
// parameter, by slot name (state()'s "<index>.<slot>"): SGD's "momentum"
// when momentum > 0, LARS's "momentum", Adam's, AdamW's and LAMB's
// "exp_avg" and "exp_avg_sq"; besides them one update count per parameter.
// What the memory planner counts. Throws InvalidArgument for an unknown name.
std::vector<std::string> state_slots(const OptimizerConfig& config);

// Builds the named optimizer after check_optimizer_config(config).
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config,
                                          std::vector<Variable> parameters);

}  // namespace tandem::optim
