#pragma once
// Private helpers shared by the per-example losses and the metric kernels:
// the shape and label checks for class logits (N, ..., K) against i32 labels
// (N, ...), the target checks for element-wise losses, and the per-position
// token cross-entropy. Legend: N examples, P label positions, K classes.

#include <cstdint>
#include <optional>

#include "tandem/tensor/tensor.h"

namespace tandem::kernels::detail {

struct ClassLayout {
  int64_t examples = 0;   // N: the logits' dimension 0
  int64_t positions = 0;  // P: labels per example (the labels' dims after the first)
  int64_t classes = 0;    // K: the logits' last dimension
};

// Checks logits (N, ..., K) of a floating dtype with K >= 1 and labels i32
// of the logits' shape without its last dimension, on one device. Throws
// ShapeError naming both shapes; op prefixes the message.
ClassLayout class_layout(const Tensor& logits, const Tensor& labels, const char* op);

// class_layout, and every label ignore_index or in [0, K) (read back from a
// device: a synchronisation). Throws InvalidArgument naming the first bad
// label's position and value.
ClassLayout check_class_labels(const Tensor& logits, const Tensor& labels,
                               std::optional<int32_t> ignore_index, const char* op);

// Checks targets against predictions (N, ...) of a floating dtype: the same
// shape, or one (N,) and the other (N, 1); targets floating or i32. Returns
// the targets as f32 (shared when they already are). Throws ShapeError naming
// both shapes and dtypes.
Tensor check_targets(const Tensor& predictions, const Tensor& targets, const char* op);

// Per position p of the N * P: token[p] = sum_k q_k * (lse - x_k) with
// q = (1 - label_smoothing) * onehot(label) + label_smoothing / K, and
// lse = log sum_k exp(x_k) (stored as f32 into log_sum_exp when non-null).
// Ignored positions get token 0 (and lse 0). Computed in f32 with double
// sums after subtracting the row maximum. Labels must have been checked.
void token_cross_entropy(const Tensor& logits, const Tensor& labels, const ClassLayout& layout,
                         std::optional<int32_t> ignore_index, double label_smoothing, double* token,
                         float* log_sum_exp);

}  // namespace tandem::kernels::detail
