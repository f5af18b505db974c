#pragma once
// The batch-size finder (`tandem tune batch-size`): which global batch
// reaches a given loss soonest on this machine, and with which learning
// rate. Three measurements, then one formula:
//  1. The largest batch that fits: the memory planner's (train/memory_plan.h)
//     largest micro-batch under the memory limit, times the replicas; no
//     trial goes past it, so none can run out of memory.
//  2. Throughput: a short timed run at each batch of a geometric series
//     (from 8 examples per replica, doubling) up to that largest batch.
//  3. The gradient noise scale B_noise (train/noise_scale.h) in a short run
//     at the run's own batch.
//  McCandlish et al.'s relation between steps and batch, S = S_min (1 +
//  B_noise / B), makes the time to a target proportional to
//  (B + B_noise) / throughput(B) (Pollux's goodput, inverted): the batch
//  that minimises it is recommended, with the learning rate scaled to it
//  from the run's (linear for SGD-type optimizers, square root for
//  Adam-type) and a warm-up when it grows.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tandem/data/dataset.h"
#include "tandem/train/model_factory.h"
#include "tandem/train/trainer.h"

namespace tandem::tune {

struct BatchSizeFinderOptions {
  train::ModelFactory model;
  // The run as the user would train it: its batch_size and learning rate
  // are the reference the recommendation scales from; its strategy,
  // precision, optimizer and input are the trials'.
  train::TrainConfig config;
  data::Dataset train;  // single examples (repeated for the trials)
  int64_t resident_input_bytes = 0;
  int64_t memory_limit = 0;  // bytes per device; > 0
  int64_t min_batch = 0;     // the series' start (global); 0: 8 per replica
  int64_t max_batch = 8192;  // the series' cap (global)
  int64_t timed_steps = 10;  // per throughput trial, after the warm-up steps
  int64_t warmup_steps = 3;
  // The noise-scale run. B_noise grows as training goes on (the gradient
  // shrinks faster than its noise): a run from the initial weights measures
  // an early, small value, which favours small batches.
  int64_t noise_steps = 50;
};

struct BatchSizeTrial {
  int64_t batch = 0;                 // global
  double examples_per_second = 0.0;  // batch / median step time
  int64_t predicted_peak_bytes = 0;  // the fullest device's, from the plan
  double relative_time = 0.0;        // predicted time to a target against the best (1: best)
};

struct BatchSizeRecommendation {
  int64_t largest_fitting_batch = 0;  // global
  double noise_scale = 0.0;           // B_noise, examples (NaN when it could not be measured)
  std::vector<BatchSizeTrial> trials;
  int64_t batch = 0;  // recommended global batch
  double learning_rate = 0.0;
  std::string lr_scaling;  // the rule that scaled it
  int64_t reference_batch = 0;
  double warmup_epochs = 0.0;
};

// Runs the trials (each a short fit() of its own) and recommends. on_trial
// sees each trial as it ends. Throws InvalidArgument when not even the
// smallest batch fits the limit, or the data holds fewer examples than the
// replicas; what a trial's training throws.
BatchSizeRecommendation find_batch_size(
    const BatchSizeFinderOptions& options,
    const std::function<void(const BatchSizeTrial&)>& on_trial = {});

}  // namespace tandem::tune
