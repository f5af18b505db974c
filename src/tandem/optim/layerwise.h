#pragma once
// Layer-wise adaptive optimizers for large batches: LARS (You et al. 2017)
// and LAMB (You et al. 2019). Each scales a parameter's step by a trust
// ratio ||w|| / ||update||, so that layers whose gradients are large
// relative to their weights do not take steps that undo them. The usual
// exclusions apply to parameters of rank at most 1 (biases, batch and layer
// norm scales and shifts): no weight decay and a trust ratio of 1.
//
// LARS (Algorithm 1 of the paper), with momentum m, weight decay b and
// trust coefficient eta, for a parameter w with gradient g:
//   local = eta ||w|| / (||g|| + b ||w||)   (1 when ||w|| or ||g|| is 0)
//   v <- m v + lr local (g + b w);  w <- w - v
// LAMB (Algorithm 2), with Adam's moments and bias correction:
//   m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
//   u = m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + b w
//   w <- w - lr (||w|| / ||u||) u   (ratio 1 when ||w|| or ||u|| is 0)
// Norms are per parameter, so these optimizers need whole parameters: they
// do not run under ZeRO, whose shards cut across parameters.

#include "tandem/optim/optimizer.h"

namespace tandem::optim {

struct LarsOptions {
  double momentum = 0.9;
  double weight_decay = 0.0;
  double trust_coefficient = 0.001;  // eta
};

class Lars : public Optimizer {
 public:
  Lars(std::vector<Variable> parameters, double learning_rate, const LarsOptions& options = {});
  void step() override;
  std::string name() const override { return "lars"; }

 private:
  LarsOptions options_;
  std::vector<Tensor*> momentum_;
};

struct LambOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 0.01;
};

class Lamb : public Optimizer {
 public:
  Lamb(std::vector<Variable> parameters, double learning_rate, const LambOptions& options = {});
  void step() override;
  std::string name() const override { return "lamb"; }

 private:
  LambOptions options_;
  std::vector<Tensor*> first_moment_, second_moment_;
};

// Whether a parameter takes weight decay and a trust ratio: rank 2 or more
// (weights), not biases and normalisation parameters.
bool layerwise_adapted(const Variable& parameter);

}  // namespace tandem::optim
