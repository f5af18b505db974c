// Differentiable loss, normalisation and embedding ops.
#include "tandem/autograd/functions.h"
#include "tandem/autograd/node.h"
#include "tandem/base/error.h"
#include "tandem/kernels/embedding.h"
#include "tandem/kernels/loss.h"
#include "tandem/kernels/normalization.h"

namespace tandem {

Variable softmax_cross_entropy(const Variable& logits, const Tensor& labels, double normalizer) {
  kernels::CrossEntropyResult r =
      kernels::softmax_cross_entropy(logits.value(), labels, normalizer);
  return record_op(
      "softmax_cross_entropy", r.loss, {&logits},
      [probs = r.probabilities, labels, normalizer, dtype = logits.dtype()](BackwardContext& ctx) {
        ctx.set(0, kernels::softmax_cross_entropy_backward(probs, labels, ctx.grad_output().item(),
                                                           normalizer, dtype));
      });
}

Variable layer_norm(const Variable& x, const Variable& gamma, const Variable& beta, float eps) {
  const Tensor xv = x.value(), gv = gamma.value();
  kernels::NormResult r = kernels::layer_norm(xv, gv, beta.value(), eps);
  return record_op("layer_norm", r.y, {&x, &gamma, &beta},
                   [xv, gv, mean = r.mean, rstd = r.rstd](BackwardContext& ctx) {
                     kernels::NormGrads g =
                         kernels::layer_norm_backward(ctx.grad_output(), xv, mean, rstd, gv);
                     if (ctx.needs(0)) ctx.set(0, g.dx);
                     if (ctx.needs(1)) ctx.set(1, g.dgamma);
                     if (ctx.needs(2)) ctx.set(2, g.dbeta);
                   });
}

Variable batch_norm(const Variable& x, const Variable& gamma, const Variable& beta,
                    Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                    float eps) {
  if (!training) {
    Tensor y = kernels::batch_norm_inference(x.value(), gamma.value(), beta.value(), running_mean,
                                             running_var, eps);
    // Inference mode still differentiates through the fixed affine map.
    const Tensor rstd = kernels::inverse_std(running_var, eps);
    return record_op(
        "batch_norm", y, {&x, &gamma, &beta},
        [xv = x.value(), gv = gamma.value(), mean = running_mean, rstd](BackwardContext& ctx) {
          const Tensor& g = ctx.grad_output();
          kernels::BatchNormSums sums = kernels::batch_norm_backward_sums(g, xv, mean, rstd);
          if (ctx.needs(0)) {
            // dx = dy * gamma * rstd: the statistics are constants here.
            Tensor a = kernels::batch_norm_apply(g, Tensor::zeros(rstd.shape()), rstd, gv,
                                                 Tensor::zeros(rstd.shape()));
            ctx.set(0, a);
          }
          if (ctx.needs(1)) ctx.set(1, sums.sum_dy_xhat);
          if (ctx.needs(2)) ctx.set(2, sums.sum_dy);
        });
  }
  const Tensor xv = x.value(), gv = gamma.value();
  kernels::NormResult r =
      kernels::batch_norm_train(xv, gv, beta.value(), running_mean, running_var, momentum, eps);
  return record_op("batch_norm", r.y, {&x, &gamma, &beta},
                   [xv, gv, mean = r.mean, rstd = r.rstd](BackwardContext& ctx) {
                     kernels::NormGrads g =
                         kernels::batch_norm_backward(ctx.grad_output(), xv, mean, rstd, gv);
                     if (ctx.needs(0)) ctx.set(0, g.dx);
                     if (ctx.needs(1)) ctx.set(1, g.dgamma);
                     if (ctx.needs(2)) ctx.set(2, g.dbeta);
                   });
}

Variable embedding(const Variable& weight, const Tensor& indices) {
  return record_op(
      "embedding", kernels::embedding(weight.value(), indices), {&weight},
      [indices, vocabulary = weight.shape()[0], dtype = weight.dtype()](BackwardContext& ctx) {
        ctx.set(0, kernels::embedding_backward(ctx.grad_output(), indices, vocabulary).to(dtype));
      });
}

}  // namespace tandem
