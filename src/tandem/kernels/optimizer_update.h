#pragma once
// The optimizers' per-parameter update arithmetic (optim/optimizer.cc holds
// the bookkeeping: learning rates, bias corrections, step counts), on the
// parameter's device. Weights, gradients and state are f32 tensors of one
// shape on one device, updated in place.

#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

// PyTorch's SGD: d = g + decay w; buf = keep buf + take d (keep 0 and take 1
// on the first update); w -= lr (d + momentum buf) with Nesterov, else
// w -= lr buf. Without momentum (undefined buf) w -= lr d.
struct SgdUpdate {
  float lr = 0.0f, momentum = 0.0f, dampening = 0.0f, decay = 0.0f;
  bool first = false, nesterov = false;
};
void sgd_update(const Tensor& w, const Tensor& g, const Tensor& momentum, const SgdUpdate& s);

// Adam and AdamW: d = g + l2 w; m = b1 m + (1 - b1) d; v = b2 v + (1 - b2) d^2;
// w = w shrink - step_size m / (sqrt(v) inv_sqrt_correction2 + eps).
struct AdamUpdate {
  float b1 = 0.0f, b2 = 0.0f, eps = 0.0f, l2 = 0.0f, shrink = 1.0f, step_size = 0.0f,
        inv_sqrt_correction2 = 1.0f;
};
void adam_update(const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& v,
                 const AdamUpdate& s);

}  // namespace tandem::kernels
