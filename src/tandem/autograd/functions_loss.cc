// Differentiable per-example losses: (N,) f32 results whose backward scales
// each example's gradient by its own grad_output[n]. The backward passes
// recompute what they need from the saved inputs (the logits are held anyway)
// rather than keep f32 copies of (N, ..., K) probabilities.
#include "tandem/autograd/functions.h"
#include "tandem/autograd/node.h"
#include "tandem/kernels/per_example_loss.h"

namespace tandem {
namespace {

Variable elementwise_loss(const char* op, const Variable& predictions, const Tensor& targets,
                          const kernels::ElementwiseLossOptions& options) {
  const Tensor pv = predictions.value();
  Tensor loss = kernels::elementwise_loss_per_example(pv, targets, options);
  return record_op(op, loss, {&predictions}, [pv, targets, options](BackwardContext& ctx) {
    ctx.set(
        0, kernels::elementwise_loss_per_example_backward(ctx.grad_output(), pv, targets, options));
  });
}

}  // namespace

Variable softmax_cross_entropy_per_example(const Variable& logits, const Tensor& labels,
                                           const CrossEntropyOptions& options) {
  const Tensor lv = logits.value();
  kernels::CrossEntropyPerExample r =
      kernels::softmax_cross_entropy_per_example(lv, labels, options);
  return record_op("softmax_cross_entropy_per_example", r.loss, {&logits},
                   [lv, labels, lse = r.log_sum_exp, options](BackwardContext& ctx) {
                     ctx.set(0, kernels::softmax_cross_entropy_per_example_backward(
                                    ctx.grad_output(), lv, labels, lse, options));
                   });
}

Variable binary_cross_entropy_with_logits_per_example(const Variable& logits,
                                                      const Tensor& targets) {
  return elementwise_loss("binary_cross_entropy_with_logits_per_example", logits, targets,
                          {.kind = kernels::ElementwiseLoss::binary_cross_entropy_with_logits});
}

Variable mean_squared_error_per_example(const Variable& predictions, const Tensor& targets) {
  return elementwise_loss("mean_squared_error_per_example", predictions, targets,
                          {.kind = kernels::ElementwiseLoss::mean_squared_error});
}

Variable mean_absolute_error_per_example(const Variable& predictions, const Tensor& targets) {
  return elementwise_loss("mean_absolute_error_per_example", predictions, targets,
                          {.kind = kernels::ElementwiseLoss::mean_absolute_error});
}

Variable huber_per_example(const Variable& predictions, const Tensor& targets, double delta) {
  return elementwise_loss("huber_per_example", predictions, targets,
                          {.kind = kernels::ElementwiseLoss::huber, .huber_delta = delta});
}

}  // namespace tandem
