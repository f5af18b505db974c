#include <chrono>

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/trace.h"
#include "tandem/distribute/detail/engine_parts.h"

namespace tandem::distribute::detail {

using Clock = std::chrono::steady_clock;

WorkerGradient compute_worker_gradient(nn::Module& model, const std::vector<Variable>& parameters,
                                       const ForwardFn& forward, const data::Element& rows,
                                       int64_t global_rows, int64_t divisor, int64_t step,
                                       const EngineOptions& options, const ReplicaContext& context,
                                       precision::LossScaler* scaler) {
  WorkerGradient g;
  g.rows = rows_of(rows);
  const auto start = Clock::now();
  seed_replica_generator(options.seed, step, context);
  for (const Variable& p : parameters) const_cast<Variable&>(p).zero_grad();
  Variable loss;
  {
    trace::Span span("forward", "step");
    const Variable per_example = forward(model, {rows, global_rows, context});
    if (!per_example.defined() || per_example.shape() != Shape{g.rows}) {
      TANDEM_THROW(ShapeError, "the forward function must return per-example losses of shape (",
                   g.rows, "), got ",
                   per_example.defined() ? per_example.shape().to_string() : "nothing");
    }
    const Variable total = sum(per_example);
    g.loss_sum = static_cast<double>(total.value().item());
    loss = scale(total, static_cast<float>(1.0 / static_cast<double>(divisor)));
  }
  const auto forward_done = Clock::now();
  {
    trace::Span span("backward", "step");
    (scaler ? scaler->scale_loss(loss) : loss).backward();
  }
  slow_down(options.slow_replica, context.global_replica, Clock::now() - start);
  if (scaler) g.finite = scaler->unscale_and_check(parameters);
  g.forward_seconds = seconds(forward_done - start);
  g.backward_seconds = seconds(Clock::now() - forward_done);
  return g;
}

}  // namespace tandem::distribute::detail
