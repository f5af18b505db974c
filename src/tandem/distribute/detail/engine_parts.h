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

inline double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
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

// One parameter-server worker's forward and backward on its rows, at the
// parameters `model` holds: the per-example losses' sum divided by
// `divisor` is differentiated (scaled by `scaler` when given, and the
// gradients unscaled and checked after). Runs in the server's process or in
// a worker process (parameter_server_processes.h).
struct WorkerGradient {
  int64_t rows = 0;
  double loss_sum = 0.0;
  bool finite = true;
  double forward_seconds = 0.0, backward_seconds = 0.0;
};
WorkerGradient compute_worker_gradient(nn::Module& model, const std::vector<Variable>& parameters,
                                       const ForwardFn& forward, const data::Element& rows,
                                       int64_t global_rows, int64_t divisor, int64_t step,
                                       const EngineOptions& options, const ReplicaContext& context,
                                       precision::LossScaler* scaler);

// Test hook (fault injection): TANDEM_TEST_KILL_AFTER_WORK="RANK:N" makes MPI
// rank RANK kill itself with SIGKILL once it has sent (the chief) or
// received (a worker process) its N-th share of work, or answered its N-th
// pull (a shard rank); "RANK:N:stop" stops it (SIGSTOP) instead.
void maybe_kill_after_work(int64_t done);

}  // namespace tandem::distribute::detail
