#pragma once
// Layer and batch normalisation over the last dimension (features/channels;
// tandem images are channels-last). Statistics are stored in f32: layer
// norm's and rms norm's summed in float and double (the op table in
// docs/models.md), batch norm's split kernels' in double, single-device batch
// norm in f32 and bf16 as batch_norm_train says; x may be f32, bf16 or f16
// and y has x's dtype.
// Legend: R rows (every dimension but the last), C the last dimension.
// Batch norm is split the way synchronised batch norm needs it: per-channel
// moments, then the normalisation; in backward, per-channel sums, then dx.

#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

struct NormResult {
  Tensor y;     // x's shape and dtype
  Tensor mean;  // f32: (R,) for layer norm, (C,) for batch norm
  Tensor rstd;  // f32: 1 / sqrt(var + eps), same shape as mean
};

struct NormGrads {
  Tensor dx;      // x's shape and dtype
  Tensor dgamma;  // (C,) f32
  Tensor dbeta;   // (C,) f32
};

// Normalises each row over C; gamma, beta (C,) f32.
NormResult layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps);
NormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& rstd, const Tensor& gamma);

// RMSNorm (Zhang and Sennrich 2019): y = x / sqrt(mean(x^2) + eps) * gamma
// over each row; result.mean is undefined, rstd (R,) as above; the grads'
// dbeta is undefined.
NormResult rms_norm(const Tensor& x, const Tensor& gamma, float eps);
NormGrads rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& rstd,
                            const Tensor& gamma);

struct Moments {
  Tensor mean;        // (C,) f32
  Tensor variance;    // (C,) f32, biased (divided by R)
  int64_t count = 0;  // rows R
};

// Per-channel mean and biased variance over all rows.
Moments batch_norm_moments(const Tensor& x);
// y = (x - mean) * rstd * gamma + beta, per channel. mean, rstd, gamma, beta (C,) f32.
Tensor batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& rstd,
                        const Tensor& gamma, const Tensor& beta);
// rstd = 1 / sqrt(variance + eps).
Tensor inverse_std(const Tensor& variance, float eps);
struct BatchNormResult {
  Tensor y;          // x's shape and dtype
  Tensor mean;       // (C,) f32
  Tensor variance;   // (C,) f32, biased
  Tensor rstd;       // (C,) f32, 1 / sqrt(variance + eps)
  Tensor relu_mask;  // with relu: what batch_norm_backward needs for the ReLU
};

// Whether batch_norm_train can fuse a ReLU for x's dtype (f32 and bf16).
bool batch_norm_fuses_relu(const Tensor& x);

// Training-mode batch norm on one device: moments, running-stat update
// (running = (1 - momentum) * running + momentum * batch, unbiased variance,
// as PyTorch, though a single row gives variance 0 where PyTorch refuses),
// then apply; the running statistics change only once y is computed. f32
// and bf16 with channels in 16s run on tandem's AVX-512 row kernels
// (statistics summed in f32 per block of rows and in double across them),
// other f32 and bf16 shapes on oneDNN's primitive (statistics summed in
// f32), f16 on the split kernels below. relu (only
// where batch_norm_fuses_relu; InvalidArgument otherwise): y = max(0, BN(x))
// in the same pass.
BatchNormResult batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 Tensor& running_mean, Tensor& running_var, float momentum,
                                 float eps, bool relu = false);
// Whether batch_norm_add_relu_train takes x (f32 or bf16, channels a
// multiple of 16, an AVX-512 CPU: batch norm's row kernels).
bool batch_norm_fuses_add_relu(const Tensor& x);

// Training-mode batch norm, then a residual add and a ReLU in the same pass:
// y = max(0, BN(x) + residual) with BN(x) rounded to x's dtype first, so y
// has the bits of add_relu(batch_norm_train(...).y, residual). residual:
// x's shape and dtype. Running statistics as batch_norm_train; relu_mask
// for batch_norm_add_relu_backward. InvalidArgument where
// !batch_norm_fuses_add_relu(x).
BatchNormResult batch_norm_add_relu_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                          const Tensor& residual, Tensor& running_mean,
                                          Tensor& running_var, float momentum, float eps);
struct BatchNormAddReluGrads {
  NormGrads norm;   // x, gamma, beta
  Tensor residual;  // dy where y > 0, else 0 (x's dtype)
};
// Its gradients from dy (y's gradient) and the forward's statistics and mask.
BatchNormAddReluGrads batch_norm_add_relu_backward(const Tensor& dy, const Tensor& x,
                                                   const Tensor& mean, const Tensor& variance,
                                                   const Tensor& gamma, float eps,
                                                   const Tensor& relu_mask);

// Inference-mode batch norm with the running statistics.
Tensor batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& running_mean, const Tensor& running_var, float eps);
// Updates running statistics from batch moments (count rows); momentum 0
// leaves them as they are.
void update_running_moments(Tensor& running_mean, Tensor& running_var, const Moments& batch,
                            float momentum);

struct BatchNormSums {
  Tensor sum_dy;       // (C,) f32
  Tensor sum_dy_xhat;  // (C,) f32, xhat = (x - mean) * rstd
};
BatchNormSums batch_norm_backward_sums(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                       const Tensor& rstd);
// dx = gamma * rstd / count * (count * dy - sum_dy - xhat * sum_dy_xhat), where
// count is the number of rows the statistics covered (all replicas' for sync BN).
Tensor batch_norm_backward_dx(const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& rstd, const Tensor& gamma, const BatchNormSums& sums,
                              int64_t count);
// All three gradients for single-device batch norm, from batch_norm_train's
// mean, variance and (after a fused ReLU, where dy is the ReLU's output
// gradient) relu_mask.
NormGrads batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& variance, const Tensor& gamma, float eps,
                              const Tensor& relu_mask = Tensor());

}  // namespace tandem::kernels
