// Differentiable loss, normalisation and embedding ops.
#include "tandem/autograd/functions.h"

#include "tandem/autograd/checkpoint.h"
#include "tandem/autograd/node.h"

#include <cstring>
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

Variable rms_norm(const Variable& x, const Variable& gamma, float eps) {
  const Tensor xv = x.value(), gv = gamma.value();
  kernels::NormResult r = kernels::rms_norm(xv, gv, eps);
  return record_op("rms_norm", r.y, {&x, &gamma}, [xv, gv, rstd = r.rstd](BackwardContext& ctx) {
    kernels::NormGrads g = kernels::rms_norm_backward(ctx.grad_output(), xv, rstd, gv);
    if (ctx.needs(0)) ctx.set(0, g.dx);
    if (ctx.needs(1)) ctx.set(1, g.dgamma);
  });
}

namespace {

Variable batch_norm_training(const Variable& x, const Variable& gamma, const Variable& beta,
                             Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                             bool relu) {
  const Tensor xv = x.value(), gv = gamma.value();
  // A recomputed block (checkpoint()) already updated its running statistics.
  kernels::BatchNormResult r = kernels::batch_norm_train(
      xv, gv, beta.value(), running_mean, running_var, recomputing() ? 0.0f : momentum, eps, relu);
  return record_op(relu ? "batch_norm_relu" : "batch_norm", r.y, {&x, &gamma, &beta},
                   [xv, gv, mean = r.mean, variance = r.variance, mask = r.relu_mask,
                    eps](BackwardContext& ctx) {
                     kernels::NormGrads g = kernels::batch_norm_backward(
                         ctx.grad_output(), xv, mean, variance, gv, eps, mask);
                     if (ctx.needs(0)) ctx.set(0, g.dx);
                     if (ctx.needs(1)) ctx.set(1, g.dgamma);
                     if (ctx.needs(2)) ctx.set(2, g.dbeta);
                   });
}

}  // namespace

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
            const Tensor zero = Tensor::zeros(rstd.shape(), DType::f32, rstd.device());
            Tensor a = kernels::batch_norm_apply(g, zero, rstd, gv, zero);
            ctx.set(0, a);
          }
          if (ctx.needs(1)) ctx.set(1, sums.sum_dy_xhat);
          if (ctx.needs(2)) ctx.set(2, sums.sum_dy);
        });
  }
  return batch_norm_training(x, gamma, beta, running_mean, running_var, momentum, eps, false);
}

Variable batch_norm_relu(const Variable& x, const Variable& gamma, const Variable& beta,
                         Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                         float eps) {
  if (!training || !kernels::batch_norm_fuses_relu(x.value())) {
    return relu(batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps));
  }
  return batch_norm_training(x, gamma, beta, running_mean, running_var, momentum, eps, true);
}

Variable batch_norm_add_relu(const Variable& x, const Variable& gamma, const Variable& beta,
                             const Variable& residual, Tensor& running_mean, Tensor& running_var,
                             bool training, float momentum, float eps) {
  const Tensor xv = x.value(), gv = gamma.value();
  if (!training || !kernels::batch_norm_fuses_add_relu(xv) || residual.shape() != x.shape() ||
      residual.dtype() != x.dtype()) {
    return add_relu(batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps),
                    residual);
  }
  // A recomputed block (checkpoint()) already updated its running statistics.
  kernels::BatchNormResult r =
      kernels::batch_norm_add_relu_train(xv, gv, beta.value(), residual.value(), running_mean,
                                         running_var, recomputing() ? 0.0f : momentum, eps);
  return record_op("batch_norm_add_relu", r.y, {&x, &gamma, &beta, &residual},
                   [xv, gv, mean = r.mean, variance = r.variance, mask = r.relu_mask,
                    eps](BackwardContext& ctx) {
                     kernels::BatchNormAddReluGrads g = kernels::batch_norm_add_relu_backward(
                         ctx.grad_output(), xv, mean, variance, gv, eps, mask);
                     if (ctx.needs(0)) ctx.set(0, g.norm.dx);
                     if (ctx.needs(1)) ctx.set(1, g.norm.dgamma);
                     if (ctx.needs(2)) ctx.set(2, g.norm.dbeta);
                     if (ctx.needs(3)) ctx.set(3, g.residual);
                   });
}

Variable sync_batch_norm(const Variable& x, const Variable& gamma, const Variable& beta,
                         Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                         CrossReplicaSum& replicas) {
  const Tensor xv = x.value(), gv = gamma.value();
  const int64_t C = xv.dim(-1);
  const int64_t local_rows = C == 0 ? 0 : xv.numel() / C;
  // The per-channel arithmetic and the cross-replica sums run on the host;
  // x, y and the statistics the kernels use stay on x's device.
  const Device device = xv.device();
  const Device host = device.kind == DeviceKind::cpu ? device : cpu_device();
  // 1. Global count and mean: sum (rows, rows x local mean) over replicas.
  Tensor sums = Tensor::zeros(Shape{C + 1}, DType::f32, host);
  float* s = sums.data<float>();
  Tensor local_mean, local_variance;
  if (local_rows > 0) {
    kernels::Moments local = kernels::batch_norm_moments(xv);
    local_mean = local.mean.to(host);
    local_variance = local.variance.to(host);
    const float* m = local_mean.data<float>();
    for (int64_t c = 0; c < C; ++c) s[c] = m[c] * static_cast<float>(local_rows);
  }
  s[C] = static_cast<float>(local_rows);
  replicas.sum(sums);
  const auto count = static_cast<int64_t>(s[C] + 0.5f);
  if (count == 0) TANDEM_THROW(ShapeError, "sync_batch_norm: no rows on any replica");
  Tensor mean = Tensor::empty(Shape{C}, DType::f32, host);
  for (int64_t c = 0; c < C; ++c) mean.data<float>()[c] = s[c] / static_cast<float>(count);
  // 2. Global biased variance around the global mean: each replica's sum of
  // squared deviations from it, rows x (local variance + (local mean -
  // global mean)^2), in double, without a second pass over x.
  Tensor squares = Tensor::zeros(Shape{C}, DType::f32, host);
  if (local_rows > 0) {
    const float* lm = local_mean.data<float>();
    const float* lv = local_variance.data<float>();
    for (int64_t c = 0; c < C; ++c) {
      const double shift = static_cast<double>(lm[c]) - mean.data<float>()[c];
      squares.data<float>()[c] = static_cast<float>(static_cast<double>(local_rows) *
                                                    (static_cast<double>(lv[c]) + shift * shift));
    }
  }
  replicas.sum(squares);
  for (int64_t c = 0; c < C; ++c) squares.data<float>()[c] /= static_cast<float>(count);
  kernels::Moments global;
  global.mean = mean.to(device);
  global.variance = squares.to(device);
  global.count = count;
  kernels::update_running_moments(running_mean, running_var, global,
                                  recomputing() ? 0.0f : momentum);
  const Tensor rstd = kernels::inverse_std(global.variance, eps);
  Tensor y = local_rows > 0 ? kernels::batch_norm_apply(xv, global.mean, rstd, gv, beta.value())
                            : Tensor::empty(xv.shape(), xv.dtype(), device);
  CrossReplicaSum* sum = &replicas;
  return record_op(
      "sync_batch_norm", y, {&x, &gamma, &beta},
      [xv, gv, mean = global.mean, rstd, count, sum, C, local_rows, device,
       host](BackwardContext& ctx) {
        // 3. dx needs the global sums of dy and dy * xhat.
        kernels::BatchNormSums local_sums{Tensor::zeros(Shape{C}, DType::f32, device),
                                          Tensor::zeros(Shape{C}, DType::f32, device)};
        if (local_rows > 0)
          local_sums = kernels::batch_norm_backward_sums(ctx.grad_output(), xv, mean, rstd);
        Tensor packed = Tensor::empty(Shape{2 * C}, DType::f32, host);
        packed.slice(0, C).copy_from(local_sums.sum_dy);
        packed.slice(C, 2 * C).copy_from(local_sums.sum_dy_xhat);
        sum->sum(packed);
        const kernels::BatchNormSums global_sums{packed.slice(0, C).to(device).clone(),
                                                 packed.slice(C, 2 * C).to(device).clone()};
        if (ctx.needs(0)) {
          ctx.set(0, local_rows > 0 ? kernels::batch_norm_backward_dx(ctx.grad_output(), xv, mean,
                                                                      rstd, gv, global_sums, count)
                                    : Tensor::zeros(xv.shape(), xv.dtype(), device));
        }
        // Parameter gradients stay local: the reducer sums them over replicas.
        if (ctx.needs(1)) ctx.set(1, local_sums.sum_dy_xhat);
        if (ctx.needs(2)) ctx.set(2, local_sums.sum_dy);
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
