#pragma once
// Private: single-device batch normalisation on oneDNN's batch_normalization
// primitives (JIT, vectorised for f32 and bf16), for the dtypes they take;
// normalization.cc falls back to its own loops for f16. Statistics come
// from the primitive in f32 (two passes: mean, then variance around it).
// Synchronised batch norm stays on normalization.cc's split kernels, which
// need the statistics between the passes.

#include "tandem/kernels/normalization.h"
#include "tandem/tensor/tensor.h"

namespace tandem::kernels::detail {

bool batch_norm_supported(const Tensor& x);

struct BatchNormForward {
  Tensor y;          // x's shape and dtype
  Tensor mean;       // (C,) f32
  Tensor variance;   // (C,) f32, biased
  Tensor relu_mask;  // with relu: the primitive's workspace (u8), for backward
};

// Training mode: x (R, C) in rows of C channels (any rank, channels last),
// gamma and beta (C,) f32, R > 0. relu: y = max(0, batch_norm(x)) in the
// same pass (oneDNN's fuse_norm_relu).
BatchNormForward batch_norm_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     float eps, bool relu);
// Inference mode with given statistics.
Tensor batch_norm_with_stats(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             const Tensor& mean, const Tensor& variance, float eps);
// dx (through the batch statistics), dgamma and dbeta of batch_norm_training;
// relu_mask as it returned (undefined without relu).
NormGrads batch_norm_training_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                       const Tensor& variance, const Tensor& gamma, float eps,
                                       const Tensor& relu_mask);

// The same on tandem's AVX-512 row kernels (batch_norm_rows.cc), which
// batch_norm_training and its backward use where they apply: f32 or bf16,
// C a multiple of 16, an AVX-512 CPU. oneDNN 2.6's primitive ran resnet's
// 16-channel batch norms at about 3 GB/s on an AMX Xeon. Statistics in one
// read of x: each block of rows' sum, mean and squares around that mean in
// f32, combined across blocks in double, whatever the thread count; the
// ReLU mask is a bit per element (u8, x.numel() / 8 bytes).
// With a residual (x's shape and dtype; relu set): y = max(0, BN(x) +
// residual), BN(x) rounded to x's dtype first (add_relu's bits after the
// plain batch norm); the backward then writes the residual's gradient (the
// ReLU's output gradient masked) into residual_grad when non-null.
bool batch_norm_rows_apply(const Tensor& x);
BatchNormForward batch_norm_rows_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                          float eps, bool relu, const Tensor& residual = Tensor());
NormGrads batch_norm_rows_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                   const Tensor& variance, const Tensor& gamma, float eps,
                                   const Tensor& relu_mask, Tensor* residual_grad = nullptr);

}  // namespace tandem::kernels::detail
