#include "tandem/train/noise_scale.h"

#include <cmath>
#include <limits>

#include "tandem/base/error.h"

namespace tandem::train {

NoiseScaleEstimator::NoiseScaleEstimator(double decay) : decay_(decay) {
  if (!(decay >= 0.0 && decay < 1.0))
    TANDEM_THROW(InvalidArgument, "noise scale smoothing must be in [0, 1), got ", decay);
}

bool NoiseScaleEstimator::add(const GradientNormSample& s) {
  if (!std::isfinite(s.small_squares) || !std::isfinite(s.big_squares) ||
      !(s.small_batch > 0.0 && s.small_batch < s.big_batch) || !std::isfinite(s.big_batch))
    return false;
  const double squares = (s.big_batch * s.big_squares - s.small_batch * s.small_squares) /
                         (s.big_batch - s.small_batch);
  const double trace =
      (s.small_squares - s.big_squares) / (1.0 / s.small_batch - 1.0 / s.big_batch);
  // The first measurement starts the averages (no bias towards zero).
  const double keep = samples_ == 0 ? 0.0 : decay_;
  const double next_squares = keep * squares_ + (1.0 - keep) * squares;
  const double next_trace = keep * trace_ + (1.0 - keep) * trace;
  // Finite figures whose estimate overflows would leave the averages
  // infinite for good (and unsaveable in a checkpoint's JSON).
  if (!std::isfinite(next_squares) || !std::isfinite(next_trace)) return false;
  squares_ = next_squares;
  trace_ = next_trace;
  ++samples_;
  return true;
}

void NoiseScaleEstimator::restore(const Averages& a) {
  if (!std::isfinite(a.trace) || !std::isfinite(a.squares) || a.samples < 0)
    TANDEM_THROW(InvalidArgument, "noise scale averages must be finite with a count >= 0, got ",
                 a.trace, ", ", a.squares, " over ", a.samples, " samples");
  trace_ = a.trace;
  squares_ = a.squares;
  samples_ = a.samples;
}

double NoiseScaleEstimator::noise_scale() const {
  if (samples_ == 0 || !(squares_ > 0.0)) return std::numeric_limits<double>::quiet_NaN();
  return trace_ / squares_;
}

}  // namespace tandem::train
