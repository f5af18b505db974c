#pragma once
// Per-example losses: each returns (N,) f32 with example n's loss the mean over
// its positions (labelled positions or elements), so that a caller sums them
// and divides by the global batch size itself. Computed in f32 with double
// sums whatever the input dtype; gradients have the input's dtype.

#include <cstdint>
#include <optional>

#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

struct CrossEntropyOptions {
  // Positions whose label equals this contribute neither loss nor gradient.
  std::optional<int32_t> ignore_index;
  // eps in [0, 1]: the target distribution is (1 - eps) * onehot + eps / K,
  // as PyTorch's CrossEntropyLoss(label_smoothing = eps).
  double label_smoothing = 0.0;
};

struct CrossEntropyPerExample {
  Tensor loss;         // (N,) f32
  Tensor log_sum_exp;  // labels' shape (N, ...) f32: log sum_k exp(logits), 0 where ignored
};

// logits (N, ..., K) f32/bf16/f16, labels (N, ...) i32 with the logits' dims
// but the last ((N, K)/(N,) for a classifier, (B, T, V)/(B, T) for a language
// model). loss[n] is the mean token cross-entropy over example n's positions
// that are not ignored (0 when all are). Log-sum-exp with the row maximum
// subtracted. Throws ShapeError for shapes or dtypes that do not fit,
// InvalidArgument for a label outside [0, K) that is not ignore_index (naming
// its position and value) or label_smoothing outside [0, 1].
CrossEntropyPerExample softmax_cross_entropy_per_example(const Tensor& logits, const Tensor& labels,
                                                         const CrossEntropyOptions& options = {});

// d (sum_n grad_loss[n] * loss[n]) / d logits, of the logits' shape and dtype:
// grad_loss[n] / count_n * (softmax - target distribution) at the count_n
// positions of example n that are not ignored, 0 elsewhere. grad_loss (N,)
// floating; log_sum_exp from the forward pass (the softmax is recomputed from
// the logits instead of kept). Throws as the forward pass.
Tensor softmax_cross_entropy_per_example_backward(const Tensor& grad_loss, const Tensor& logits,
                                                  const Tensor& labels, const Tensor& log_sum_exp,
                                                  const CrossEntropyOptions& options = {});

// Losses of predictions x against targets t, element by element (d = x - t).
enum class ElementwiseLoss : uint8_t {
  binary_cross_entropy_with_logits,  // max(x, 0) - x t + log(1 + exp(-|x|))
  mean_squared_error,                // d^2
  mean_absolute_error,               // |d|, subgradient 0 at d = 0
  huber,                             // 0.5 d^2 for |d| < delta, else delta (|d| - 0.5 delta)
};

struct ElementwiseLossOptions {
  ElementwiseLoss kind = ElementwiseLoss::mean_squared_error;
  double huber_delta = 1.0;  // > 0; huber only
};

// predictions (N, ...) f32/bf16/f16, targets of the same shape (or (N,)
// against (N, 1)), floating or i32 (converted to f32; in [0, 1] for binary
// cross-entropy, not checked) -> (N,) f32, the mean element loss of each
// example. Throws ShapeError naming both shapes when they do not fit,
// InvalidArgument for huber_delta <= 0.
Tensor elementwise_loss_per_example(const Tensor& predictions, const Tensor& targets,
                                    const ElementwiseLossOptions& options);

// d (sum_n grad_loss[n] * loss[n]) / d predictions, of the predictions' shape
// and dtype; grad_loss (N,) floating. Throws as the forward pass.
Tensor elementwise_loss_per_example_backward(const Tensor& grad_loss, const Tensor& predictions,
                                             const Tensor& targets,
                                             const ElementwiseLossOptions& options);

}  // namespace tandem::kernels
