#include "tandem/kernels/loss.h"

#include <cmath>
#include <vector>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/checks.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/float_io.h"

namespace tandem::kernels {
namespace {

using detail::dispatch_floating;
using detail::to_f32;

// Logits (B, K) and i32 labels (B,) on one device; with `values`, each label
// in [0, K) (read back from a device: the backward pass leaves that to the
// forward's check, so as not to stall a GPU's stream).
void check_cross_entropy(const char* op, const Tensor& logits, const Tensor& labels, bool values) {
  detail::check_same_device(op, logits, {&labels});
  if (logits.rank() != 2) {
    TANDEM_THROW(ShapeError, op, ": logits must be (B, K), got ", logits.shape().to_string());
  }
  const int64_t rows = logits.dim(0);
  if (labels.dtype() != DType::i32 || labels.rank() != 1 || labels.dim(0) != rows) {
    TANDEM_THROW(ShapeError, op, ": labels must be i32 of shape (", rows, ",), got ",
                 labels.to_string());
  }
  if (values) detail::check_index_values(op, labels, logits.dim(1), "label", "row");
}

double resolve_normalizer(double normalizer, int64_t rows) {
  return normalizer > 0.0 ? normalizer : static_cast<double>(rows);
}

// Writes each row's softmax into probs (f32) and returns per-row -log p[label]
// when labels is non-null.
void softmax_rows(const Tensor& logits, float* probs, const int32_t* labels, double* row_loss) {
  const int64_t B = logits.dim(0), K = logits.dim(1);
  dispatch_floating(logits.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(logits.raw_data());
    parallel_for(B, 64, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = x + r * K;
        float* p = probs + r * K;
        float max = -INFINITY;
        for (int64_t k = 0; k < K; ++k) max = std::max(max, to_f32(row[k]));
        double total = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          p[k] = std::exp(to_f32(row[k]) - max);
          total += p[k];
        }
        const float inv = static_cast<float>(1.0 / total);
        for (int64_t k = 0; k < K; ++k) p[k] *= inv;
        if (labels != nullptr) {
          // -log softmax[label] = log(total) - (x[label] - max), stable even
          // when the probability underflows to 0.
          row_loss[r] = std::log(total) - (to_f32(row[labels[r]]) - max);
        }
      }
    });
  });
}

}  // namespace

CrossEntropyResult softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                         double normalizer) {
  check_cross_entropy("softmax_cross_entropy", logits, labels, /*values=*/true);
  TANDEM_DISPATCH_CUDA(logits, softmax_cross_entropy(logits, labels, normalizer));
  const int64_t B = logits.dim(0);
  CrossEntropyResult result;
  result.probabilities = Tensor::empty(logits.shape(), DType::f32, logits.device());
  std::vector<double> row_loss(static_cast<size_t>(B), 0.0);
  softmax_rows(logits, result.probabilities.data<float>(), labels.data<int32_t>(), row_loss.data());
  double total = 0.0;
  for (double v : row_loss) total += v;
  result.loss = Tensor::full(Shape{}, static_cast<float>(total / resolve_normalizer(normalizer, B)),
                             DType::f32, logits.device());
  return result;
}

Tensor softmax_cross_entropy_backward(const Tensor& probabilities, const Tensor& labels,
                                      float grad_loss, double normalizer, DType out_dtype) {
  check_cross_entropy("softmax_cross_entropy_backward", probabilities, labels, /*values=*/false);
  TANDEM_DISPATCH_CUDA(probabilities, softmax_cross_entropy_backward(
                                          probabilities, labels, grad_loss, normalizer, out_dtype));
  const int64_t B = probabilities.dim(0), K = probabilities.dim(1);
  const float factor = static_cast<float>(grad_loss / resolve_normalizer(normalizer, B));
  Tensor grad = Tensor::empty(probabilities.shape(), out_dtype, probabilities.device());
  const float* p = probabilities.data<float>();
  const int32_t* l = labels.data<int32_t>();
  dispatch_floating(out_dtype, "softmax_cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    T* g = static_cast<T*>(grad.raw_data());
    parallel_for(B, 64, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t k = 0; k < K; ++k) {
          const float onehot = k == l[r] ? 1.0f : 0.0f;
          g[r * K + k] = detail::from_f32<T>(factor * (p[r * K + k] - onehot));
        }
      }
    });
  });
  return grad;
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  check_cross_entropy("count_correct", logits, labels, /*values=*/true);
  TANDEM_DISPATCH_CUDA(logits, count_correct(logits, labels));
  const int64_t B = logits.dim(0), K = logits.dim(1);
  const int32_t* l = labels.data<int32_t>();
  int64_t correct = 0;
  dispatch_floating(logits.dtype(), "count_correct", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(logits.raw_data());
    for (int64_t r = 0; r < B; ++r) {
      int64_t best = 0;
      for (int64_t k = 1; k < K; ++k) {
        if (to_f32(x[r * K + k]) > to_f32(x[r * K + best])) best = k;
      }
      correct += best == l[r];
    }
  });
  return correct;
}

}  // namespace tandem::kernels
