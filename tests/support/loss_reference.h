#pragma once
// Naive double-precision references for the per-example losses and metric
// kernels, PyTorch's semantics written out position by position. Inputs are
// read as the doubles their dtype holds, so a reference for bf16 logits is
// the exact loss of the rounded values.

#include <cstdint>
#include <optional>
#include <vector>

#include "tandem/kernels/per_example_loss.h"
#include "tandem/tensor/tensor.h"

namespace tandem::testing {

// Token cross-entropy of each label position of logits (N, ..., K): sum_k q_k
// (lse - x_k), q = (1 - eps) onehot + eps / K; NaN at ignored positions.
std::vector<double> token_cross_entropy_reference(const Tensor& logits, const Tensor& labels,
                                                  std::optional<int32_t> ignore_index,
                                                  double label_smoothing);

// (N,): each example's mean token loss over its counted positions (0 if none).
std::vector<double> cross_entropy_per_example_reference(
    const Tensor& logits, const Tensor& labels, const kernels::CrossEntropyOptions& options);

// d (sum_n grad_loss[n] * loss[n]) / d logits, logits' element order.
std::vector<double> cross_entropy_per_example_grad_reference(
    const Tensor& logits, const Tensor& labels, const kernels::CrossEntropyOptions& options,
    const std::vector<double>& grad_loss);

// The element loss and its derivative in x at d = x - t (see kernels::ElementwiseLoss).
double elementwise_loss_reference(kernels::ElementwiseLoss kind, double x, double t, double delta);
double elementwise_grad_reference(kernels::ElementwiseLoss kind, double x, double t, double delta);

// (N,): each example's mean element loss; predictions (N, ...) and targets
// with the same number of elements.
std::vector<double> elementwise_loss_per_example_reference(
    const Tensor& predictions, const Tensor& targets,
    const kernels::ElementwiseLossOptions& options);

// d (sum_n grad_loss[n] * loss[n]) / d predictions.
std::vector<double> elementwise_loss_per_example_grad_reference(
    const Tensor& predictions, const Tensor& targets,
    const kernels::ElementwiseLossOptions& options, const std::vector<double>& grad_loss);

}  // namespace tandem::testing
