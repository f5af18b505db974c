#pragma once
// Private to the engines: the pieces more than one of them uses.

#include <chrono>
#include <cstdint>
#include <functional>

#include "tandem/distribute/engine.h"

namespace tandem::distribute::detail {

// Rows of a batch: its first feature's first dimension (0 for a scalar).
inline int64_t rows_of(const data::Element& e) {
  const Tensor& first = e.features().front().second;
  return first.rank() == 0 ? 0 : first.dim(0);
}

// Runs fn on every local replica's share of `batch`, on the model model(r)
// returns, in evaluation mode and without gradients; modes are restored.
void evaluate_on_replicas(Strategy& strategy, const std::function<nn::Module&(int)>& model,
                          const data::Element& batch, const EvaluateFn& fn);

// A loss scaler's state in an EngineState's metadata, and back (nothing
// without a scaler, or without the metadata).
void save_scaler_state(const precision::LossScaler* scaler, EngineState& state);
void load_scaler_state(const EngineState& state, precision::LossScaler* scaler);

// Sleeps (factor - 1) x compute when global_replica is the slow one, and
// returns how long.
std::chrono::steady_clock::duration slow_down(const SlowReplica& slow, int global_replica,
                                              std::chrono::steady_clock::duration compute);

}  // namespace tandem::distribute::detail
