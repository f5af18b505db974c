#pragma once
// Naive double-precision references for the per-example losses and metric
// kernels, PyTorch's semantics written out position by position. Inputs are
// read as the doubles their dtype holds, so a reference for bf16 logits is
// the exact loss of the rounded values.

#include <cstdint>
#include <optional>
#include <vector>

#include "tandem/kernels/metrics.h"
#include "tandem/kernels/per_example_loss.h"
#include "tandem/tensor/tensor.h"

namespace tandem::testing {

// Token cross-entropy of each label position of logits (N, ..., K): sum_k q_k
// (lse - x_k), q = (1 - eps) onehot + eps / K; NaN at ignored positions.
std::vector<double> token_cross_entropy_reference(const Tensor& logits, const Tensor& labels,
                                                  std::optional<int32_t> ignore_index,
                                                  double label_smoothing);

// The same on logits already in double: rows of K classes, one label each
// (the op table's references, which central differences perturb).
std::vector<double> token_cross_entropy_reference(const std::vector<double>& logits, int64_t K,
                                                  const std::vector<int32_t>& labels,
                                                  std::optional<int32_t> ignore_index,
                                                  double label_smoothing);

// (N,): each example's mean token loss over its counted positions (0 if none).
std::vector<double> cross_entropy_per_example_reference(
    const Tensor& logits, const Tensor& labels, const kernels::CrossEntropyOptions& options);
// The same in double: N examples of labels.size() / N positions each.
std::vector<double> cross_entropy_per_example_reference(
    const std::vector<double>& logits, int64_t K, const std::vector<int32_t>& labels, int64_t N,
    const kernels::CrossEntropyOptions& options);

// d (sum_n grad_loss[n] * loss[n]) / d logits, logits' element order.
std::vector<double> cross_entropy_per_example_grad_reference(
    const Tensor& logits, const Tensor& labels, const kernels::CrossEntropyOptions& options,
    const std::vector<double>& grad_loss);

// Top-k accuracy's sums over rows of K logits: sum counts the positions
// whose label has fewer than k larger logits (ties in its favour), count the
// positions whose label is not ignore_index.
kernels::MetricSums top_k_reference(const std::vector<double>& logits, int64_t K,
                                    const std::vector<int32_t>& labels, int k,
                                    std::optional<int32_t> ignore_index);

// The element loss and its derivative in x at d = x - t (see kernels::ElementwiseLoss).
double elementwise_loss_reference(kernels::ElementwiseLoss kind, double x, double t, double delta);
double elementwise_grad_reference(kernels::ElementwiseLoss kind, double x, double t, double delta);

// (N,): each example's mean element loss; predictions (N, ...) and targets
// with the same number of elements.
std::vector<double> elementwise_loss_per_example_reference(
    const Tensor& predictions, const Tensor& targets,
    const kernels::ElementwiseLossOptions& options);
// The same in double: N examples of predictions.size() / N elements each.
std::vector<double> elementwise_loss_per_example_reference(
    const std::vector<double>& predictions, const std::vector<double>& targets, int64_t N,
    const kernels::ElementwiseLossOptions& options);

// d (sum_n grad_loss[n] * loss[n]) / d predictions.
std::vector<double> elementwise_loss_per_example_grad_reference(
    const Tensor& predictions, const Tensor& targets,
    const kernels::ElementwiseLossOptions& options, const std::vector<double>& grad_loss);

}  // namespace tandem::testing
