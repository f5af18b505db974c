#pragma once
// Metric kernels (no gradient): each returns partial sums as doubles, exact
// for counts, so that a caller can add them over replicas and batches before
// dividing. Sums are taken in a fixed order: the same inputs give the same
// bits whatever the thread count.

#include <cstdint>
#include <optional>

#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

struct MetricSums {
  double sum = 0;
  double count = 0;

  MetricSums& operator+=(const MetricSums& other) {
    sum += other.sum;
    count += other.count;
    return *this;
  }
};

// logits (N, ..., K) f32/bf16/f16, labels (N, ...) i32 with the logits' dims
// but the last. sum: positions whose label is among the k largest logits (on
// ties, correct only if strictly fewer than k logits are larger than the
// label's); count: positions whose label is not ignore_index. k = 1 is the
// accuracy. Throws InvalidArgument for k < 1 or a label outside [0, K) that
// is not ignored (naming its position and value), ShapeError for shapes that
// do not fit.
MetricSums top_k_correct(const Tensor& logits, const Tensor& labels, int k,
                         std::optional<int32_t> ignore_index = std::nullopt);

// predictions (N, ...) floating, targets of the same shape (or (N,) against
// (N, 1)), floating or i32. sum: sum |p - t| (resp. (p - t)^2) over all
// elements; count: the number of elements. Throws ShapeError naming both
// shapes when they do not fit.
MetricSums absolute_error_sums(const Tensor& predictions, const Tensor& targets);
MetricSums squared_error_sums(const Tensor& predictions, const Tensor& targets);

// As top_k_correct's arguments. sum: the token cross-entropy (natural log)
// summed over the positions whose label is not ignore_index; count: their
// number. The perplexity is exp(sum / count). Throws as top_k_correct.
MetricSums token_cross_entropy_sums(const Tensor& logits, const Tensor& labels,
                                    std::optional<int32_t> ignore_index = std::nullopt);

}  // namespace tandem::kernels
