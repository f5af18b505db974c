#pragma once
// Softmax cross-entropy, fused and numerically stable (log-sum-exp with the
// row maximum subtracted), computed in f32 whatever the logits' dtype.
// Legend: B rows (examples), K classes.

#include <cstdint>

#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

struct CrossEntropyResult {
  Tensor loss;           // () f32: sum of per-example losses / normalizer
  Tensor probabilities;  // (B, K) f32 softmax, kept for the backward pass
};

// logits (B, K) f32/bf16/f16, labels (B,) i32 in [0, K). normalizer <= 0 means
// B (the mean). A strategy passes the global batch size so that replicas'
// losses add up to the global mean. Throws InvalidArgument for a label out of
// range, naming its row.
CrossEntropyResult softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                         double normalizer = 0.0);

// d loss / d logits = grad_loss * (probabilities - onehot(labels)) / normalizer,
// as a (B, K) tensor of out_dtype.
Tensor softmax_cross_entropy_backward(const Tensor& probabilities, const Tensor& labels,
                                      float grad_loss, double normalizer = 0.0,
                                      DType out_dtype = DType::f32);

// Number of rows whose arg-max equals the label (ties: the first maximum).
int64_t count_correct(const Tensor& logits, const Tensor& labels);

}  // namespace tandem::kernels
