// What every engine shares: its settings' checks, the per-call counts of a
// step, evaluation on the replicas, loss-scaler state and the slow replica.
#include "tandem/distribute/engine.h"

#include <cstdio>
#include <string>
#include <thread>

#include "tandem/base/error.h"
#include "tandem/data/distribute.h"
#include "tandem/distribute/detail/engine_parts.h"
#include "tandem/distribute/strategy.h"

namespace tandem::distribute {

void accumulate_step_counts(StepResult& a, const StepResult& b) {
  const auto add = [](auto& into, const auto& from) {
    if (into.size() < from.size()) into.resize(from.size());
    for (size_t i = 0; i < from.size(); ++i) into[i] += from[i];
  };
  // A result of no rows has a NaN loss (the parameter-server engine's):
  // leave it out rather than let NaN * 0 poison the sum.
  const auto term = [](const StepResult& r) {
    return r.global_rows > 0 ? r.loss * static_cast<double>(r.global_rows) : 0.0;
  };
  const double loss_sum = term(a) + term(b);
  a.global_rows += b.global_rows;
  a.loss = a.global_rows > 0 ? loss_sum / static_cast<double>(a.global_rows) : b.loss;
  add(a.replica_loss_sums, b.replica_loss_sums);
  add(a.staleness, b.staleness);
  add(a.dropped_rows, b.dropped_rows);
  if (a.replica_reports.size() < b.replica_reports.size())
    a.replica_reports.resize(b.replica_reports.size());
  for (size_t r = 0; r < b.replica_reports.size(); ++r)
    add(a.replica_reports[r], b.replica_reports[r]);
}

void check_engine_options(const EngineOptions& options, int workers) {
  const SlowReplica& slow = options.slow_replica;
  if (slow.replica != -1) {
    if (slow.replica < 0 || slow.replica >= workers) {
      TANDEM_THROW(InvalidArgument, "--slow-replica names replica ", slow.replica,
                   " but there are ", workers, " replicas (0 to ", workers - 1, ")");
    }
    if (!(slow.factor >= 1.0) || slow.factor > kMaxSlowFactor) {
      TANDEM_THROW(InvalidArgument, "--slow-replica's factor must be in [1, ", kMaxSlowFactor,
                   "], got ", slow.factor);
    }
  }
  if (options.sync_every < 0) {
    TANDEM_THROW(InvalidArgument,
                 "--sync-every must be at least 1 (local SGD averages every K "
                 "steps), got ",
                 options.sync_every);
  }
  const ParameterServerOptions& ps = options.parameter_server;
  if (ps.shards < 1 || ps.shards > 256) {
    TANDEM_THROW(InvalidArgument, "--ps (parameter-server shards) must be in [1, 256], got ",
                 ps.shards);
  }
  if (ps.max_staleness && *ps.max_staleness < 0) {
    TANDEM_THROW(InvalidArgument,
                 "max_staleness (--max-staleness) must be at least 0 (0: synchronous rounds; "
                 "leave it out or say 'unbounded' for fully asynchronous training), got ",
                 *ps.max_staleness);
  }
  if (ps.backup_workers < 0 || (ps.backup_workers > 0 && ps.backup_workers >= workers)) {
    TANDEM_THROW(InvalidArgument, "--backup-workers must be in [0, workers - 1] = [0, ",
                 workers - 1, "] (a round needs at least one gradient), got ", ps.backup_workers);
  }
  if (ps.backup_workers > 0 && !(ps.max_staleness && *ps.max_staleness == 0)) {
    TANDEM_THROW(InvalidArgument,
                 "--backup-workers belongs to synchronous rounds "
                 "(--max-staleness 0); asynchronous workers never wait for each other");
  }
  if (ps.min_shard_bytes < 1) {
    TANDEM_THROW(InvalidArgument, "the smallest variable piece must be at least 1 byte, got ",
                 ps.min_shard_bytes);
  }
}

namespace detail {

void evaluate_on_replicas(Strategy& strategy, const std::function<nn::Module&(int)>& model,
                          const data::Element& batch, const EvaluateFn& fn) {
  if (batch.size() == 0) TANDEM_THROW(InvalidArgument, "evaluation needs a batch with features");
  const std::vector<data::Element> parts = data::split_batch(batch, strategy.local_replicas());
  const int64_t rows = rows_of(batch);
  strategy.run([&](int r) {
    nn::Module& m = model(r);
    NoGradGuard no_grad;
    const nn::EvalModeScope eval_mode(m);
    const ReplicaContext& context = strategy.replica_context(r);
    fn(m, {data::on_device(parts[r], context.device), rows, context});
  });
}

void save_scaler_state(const precision::LossScaler* scaler, EngineState& state) {
  if (scaler == nullptr) return;
  char scale[32];
  std::snprintf(scale, sizeof(scale), "%.17g", scaler->scale());
  state.metadata["loss_scale"] = scale;
  state.metadata["loss_scale_skipped"] = std::to_string(scaler->skipped_steps());
  state.metadata["loss_scale_good_steps"] = std::to_string(scaler->steps_since_overflow());
}

void load_scaler_state(const EngineState& state, precision::LossScaler* scaler) {
  if (scaler == nullptr || !state.metadata.count("loss_scale")) return;
  scaler->restore(state.meta_number("loss_scale"), state.meta_integer("loss_scale_skipped"),
                  state.meta_integer("loss_scale_good_steps"));
}

std::chrono::steady_clock::duration slow_down(const SlowReplica& slow, int global_replica,
                                              std::chrono::steady_clock::duration compute) {
  if (slow.replica != global_replica || slow.factor <= 1.0) return {};
  const auto extra = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      compute * (slow.factor - 1.0));
  std::this_thread::sleep_for(extra);
  return extra;
}

}  // namespace detail
}  // namespace tandem::distribute
