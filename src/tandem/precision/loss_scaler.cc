#include "tandem/precision/loss_scaler.h"

#include <cmath>

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/kernels/elementwise.h"

namespace tandem::precision {

LossScaler::LossScaler(LossScalerOptions options)
    : options_(options), scale_(options.initial_scale) {
  // Applied as a float: past float's range it scaled every loss to
  // infinity, and every step was skipped.
  if (!(options.initial_scale > 0.0) || !std::isfinite(static_cast<float>(options.initial_scale))) {
    TANDEM_THROW(InvalidArgument, "loss scale must be a positive number within float's range, got ",
                 options.initial_scale);
  }
  if (!(options.growth_factor >= 1.0) ||
      !(options.backoff_factor > 0.0 && options.backoff_factor < 1.0) ||
      options.growth_interval < 1 || !(options.min_scale > 0.0)) {
    TANDEM_THROW(InvalidArgument,
                 "loss scaler: growth factor >= 1, backoff in (0, 1), growth interval >= 1 and "
                 "a positive minimum are required");
  }
  // Below its minimum, the first overflow would raise the scale.
  if (options.dynamic && options.initial_scale < options.min_scale) {
    TANDEM_THROW(InvalidArgument, "loss scaler: initial scale ", options.initial_scale,
                 " is below the minimum ", options.min_scale);
  }
}

Variable LossScaler::scale_loss(const Variable& loss) const {
  return scale_ == 1.0 ? loss : tandem::scale(loss, static_cast<float>(scale_));
}

bool LossScaler::unscale_and_check(const std::vector<Variable>& parameters) const {
  std::vector<Tensor> gradients;
  for (const Variable& p : parameters) {
    if (!p.has_grad()) continue;
    if (p.grad().dtype() != DType::f32) {
      TANDEM_THROW(InvalidArgument, "loss scaling needs f32 gradients, '", p.name(), "' has ",
                   dtype_name(p.grad().dtype()));
    }
    gradients.push_back(p.grad());
  }
  return kernels::scale_and_check_finite(gradients, static_cast<float>(1.0 / scale_));
}

void LossScaler::update(bool finite) {
  if (!finite) {
    ++skipped_;
    good_steps_ = 0;
    if (options_.dynamic) scale_ = std::max(options_.min_scale, scale_ * options_.backoff_factor);
    return;
  }
  ++good_steps_;
  if (options_.dynamic && good_steps_ % options_.growth_interval == 0) {
    const double grown = scale_ * options_.growth_factor;
    if (std::isfinite(static_cast<float>(grown))) scale_ = grown;
  }
}

void LossScaler::restore(double scale, int64_t skipped, int64_t good_steps) {
  // "inf" parsed as a positive scale, and no step was ever finite again.
  if (!(scale > 0.0) || !std::isfinite(static_cast<float>(scale)) || skipped < 0 ||
      good_steps < 0) {
    TANDEM_THROW(IoError, "checkpoint holds an invalid loss-scaler state (scale ", scale,
                 ", skipped ", skipped, ", good steps ", good_steps, ")");
  }
  scale_ = scale;
  skipped_ = skipped;
  good_steps_ = good_steps;
}

}  // namespace tandem::precision
