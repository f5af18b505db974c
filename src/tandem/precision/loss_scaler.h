#pragma once
// Loss scaling for reduced-precision gradients (TensorFlow's LossScaleOptimizer
// semantics). The loss is multiplied by the scale before backward so that
// small f16 gradients do not flush to zero; afterwards every gradient is
// unscaled and checked for inf/NaN in the same pass. Dynamic scaling starts at
// 2^15, doubles after 2000 consecutive finite steps, and on a step with any
// non-finite gradient halves the scale and skips the update (the optimizer
// must not step, so its state stays untouched). Under a strategy the check
// runs on the all-reduced gradients, which every replica holds identically,
// so all replicas skip together.

#include <cstdint>
#include <vector>

#include "tandem/autograd/variable.h"

namespace tandem::precision {

struct LossScalerOptions {
  bool dynamic = true;
  double initial_scale = 32768.0;  // 2^15; the fixed scale when !dynamic
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // consecutive finite steps before growing
  double min_scale = 1.0;
};

class LossScaler {
 public:
  // Throws InvalidArgument for a non-positive scale or bad factors.
  explicit LossScaler(LossScalerOptions options = {});

  double scale() const { return scale_; }
  // loss * scale, for backward.
  Variable scale_loss(const Variable& loss) const;
  // Multiplies every gradient by 1/scale and reports whether all are finite
  // (one pass per gradient). Parameters without a gradient are skipped.
  bool unscale_and_check(const std::vector<Variable>& parameters) const;
  // Records a step's outcome: adjusts the scale and the counters.
  void update(bool finite);

  int64_t skipped_steps() const { return skipped_; }
  int64_t steps_since_overflow() const { return good_steps_; }
  bool dynamic() const { return options_.dynamic; }

  // For checkpoints.
  void restore(double scale, int64_t skipped, int64_t good_steps);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t skipped_ = 0;
  int64_t good_steps_ = 0;
};

}  // namespace tandem::precision
