#pragma once
// The gradient noise scale (McCandlish et al. 2018, "An Empirical Model of
// Large-Batch Training"): B_simple = tr(S) / |G|^2, the per-example
// gradient covariance's trace over the squared true gradient. Batches much
// smaller than B_simple waste steps on noise; batches much larger waste
// examples (each step cannot use them). It is estimated from the squared
// norms of mean gradients at two batch sizes, which data-parallel training
// has every step for free: each replica's local gradient (B_small: its
// examples) and the all-reduced one (B_big: the global batch). With one
// replica, a micro-batch and the accumulated step play the two parts.
// Unbiased estimators of Appendix A:
//   |G|^2  ~ (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
//   tr(S)  ~ (|G_small|^2 - |G_big|^2) / (1 / B_small - 1 / B_big)
// Each is noisy alone; their exponential moving averages are divided.

#include <cstdint>

#include "tandem/distribute/engine.h"

namespace tandem::train {

using distribute::GradientNormSample;

class NoiseScaleEstimator {
 public:
  // decay: the moving averages' weight on the past, in [0, 1). The default
  // (0.99) is not explicit, so that the Trainer's Progress, which holds
  // one, stays an aggregate ({} for a fresh position).
  NoiseScaleEstimator() : NoiseScaleEstimator(0.99) {}
  explicit NoiseScaleEstimator(double decay);

  // Adds a measurement; ignored (returns false) when a figure or the
  // averages it makes are not finite, or the two batches are not
  // 0 < small < big.
  bool add(const GradientNormSample& sample);

  // The smoothed B_simple in examples; NaN before any measurement or while
  // the smoothed |G|^2 is not positive.
  double noise_scale() const;
  double trace() const { return trace_; }               // smoothed tr(S)
  double gradient_squares() const { return squares_; }  // smoothed |G|^2
  int64_t samples() const { return samples_; }

  // The averages a checkpoint saves, so that a resumed run goes on from
  // them: restore() refuses figures no estimator holds (not finite, a
  // negative count), naming them.
  struct Averages {
    double trace = 0.0, squares = 0.0;
    int64_t samples = 0;
  };
  Averages averages() const { return {trace_, squares_, samples_}; }
  void restore(const Averages& averages);

 private:
  double decay_;
  double trace_ = 0.0, squares_ = 0.0;
  int64_t samples_ = 0;
};

}  // namespace tandem::train
