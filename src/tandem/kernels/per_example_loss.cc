#include "tandem/kernels/per_example_loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/checks.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/float_io.h"
#include "tandem/kernels/detail/loss_common.h"

// Legend: N examples, P label positions per example, K classes, M elements
// per example.

namespace tandem::kernels {
namespace {

using detail::dispatch_floating;
using detail::from_f32;
using detail::to_f32;

void check_smoothing(double label_smoothing, const char* op) {
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0)) {
    TANDEM_THROW(InvalidArgument, op, ": label_smoothing must be in [0, 1], got ", label_smoothing);
  }
}

void check_delta(const ElementwiseLossOptions& options, const char* op) {
  if (options.kind == ElementwiseLoss::huber && !(options.huber_delta > 0.0)) {
    TANDEM_THROW(InvalidArgument, op, ": huber delta must be > 0, got ", options.huber_delta);
  }
}

// grad_loss floating (N,).
void check_grad_loss(const Tensor& grad_loss, int64_t examples, const char* op) {
  if (grad_loss.rank() != 1 || grad_loss.dim(0) != examples || !is_floating(grad_loss.dtype())) {
    TANDEM_THROW(ShapeError, op, ": grad_loss must be floating (", examples, ",), got ",
                 grad_loss.to_string());
  }
}

// Not-ignored positions of each example.
std::vector<int64_t> count_positions(const Tensor& labels, const detail::ClassLayout& layout,
                                     std::optional<int32_t> ignore_index) {
  const int32_t* l = labels.data<int32_t>();
  std::vector<int64_t> count(static_cast<size_t>(layout.examples), layout.positions);
  if (!ignore_index) return count;
  for (int64_t n = 0; n < layout.examples; ++n) {
    for (int64_t p = 0; p < layout.positions; ++p) {
      count[n] -= l[n * layout.positions + p] == *ignore_index;
    }
  }
  return count;
}

float element_loss(ElementwiseLoss kind, float x, float t, float delta) {
  const float d = x - t;
  switch (kind) {
    case ElementwiseLoss::binary_cross_entropy_with_logits:
      return std::max(x, 0.0f) - x * t + std::log1p(std::exp(-std::fabs(x)));
    case ElementwiseLoss::mean_squared_error:
      return d * d;
    case ElementwiseLoss::mean_absolute_error:
      return std::fabs(d);
    case ElementwiseLoss::huber:
      return std::fabs(d) < delta ? 0.5f * d * d : delta * (std::fabs(d) - 0.5f * delta);
  }
  return 0.0f;
}

// d element_loss / d x.
float element_grad(ElementwiseLoss kind, float x, float t, float delta) {
  const float d = x - t;
  const float sign = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);
  switch (kind) {
    case ElementwiseLoss::binary_cross_entropy_with_logits: {
      // sigmoid(x) without overflow on either side.
      const float e = std::exp(-std::fabs(x));
      return (x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e)) - t;
    }
    case ElementwiseLoss::mean_squared_error:
      return 2.0f * d;
    case ElementwiseLoss::mean_absolute_error:
      return sign;
    case ElementwiseLoss::huber:
      return std::fabs(d) <= delta ? d : delta * sign;
  }
  return 0.0f;
}

}  // namespace

CrossEntropyPerExample softmax_cross_entropy_per_example(const Tensor& logits, const Tensor& labels,
                                                         const CrossEntropyOptions& options) {
  const char* op = "softmax_cross_entropy_per_example";
  check_smoothing(options.label_smoothing, op);
  const detail::ClassLayout layout =
      detail::check_class_labels(logits, labels, options.ignore_index, op);
  TANDEM_DISPATCH_CUDA(logits, softmax_cross_entropy_per_example(logits, labels, options));
  const int64_t N = layout.examples, P = layout.positions;
  CrossEntropyPerExample result;
  result.log_sum_exp = Tensor::empty(labels.shape(), DType::f32, logits.device());
  std::vector<double> token(static_cast<size_t>(N * P));
  detail::token_cross_entropy(logits, labels, layout, options.ignore_index, options.label_smoothing,
                              token.data(), result.log_sum_exp.data<float>());
  const std::vector<int64_t> count = count_positions(labels, layout, options.ignore_index);
  result.loss = Tensor::empty(Shape{N}, DType::f32, logits.device());
  float* loss = result.loss.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    double total = 0.0;  // ignored positions hold 0
    for (int64_t p = 0; p < P; ++p) total += token[n * P + p];
    loss[n] = count[n] > 0 ? static_cast<float>(total / static_cast<double>(count[n])) : 0.0f;
  }
  return result;
}

Tensor softmax_cross_entropy_per_example_backward(const Tensor& grad_loss, const Tensor& logits,
                                                  const Tensor& labels, const Tensor& log_sum_exp,
                                                  const CrossEntropyOptions& options) {
  const char* op = "softmax_cross_entropy_per_example_backward";
  check_smoothing(options.label_smoothing, op);
  // The label values were checked by the forward pass (reading them again
  // would stall a GPU's stream); a label out of range only gets no target.
  const detail::ClassLayout layout = detail::class_layout(logits, labels, op);
  const int64_t N = layout.examples, P = layout.positions, K = layout.classes;
  detail::check_same_device(op, logits, {&grad_loss, &log_sum_exp});
  if (log_sum_exp.dtype() != DType::f32 || log_sum_exp.shape() != labels.shape()) {
    TANDEM_THROW(ShapeError, op, ": log_sum_exp must be f32 of the labels' shape ",
                 labels.shape().to_string(), ", got ", log_sum_exp.to_string());
  }
  check_grad_loss(grad_loss, N, op);
  TANDEM_DISPATCH_CUDA(logits, softmax_cross_entropy_per_example_backward(grad_loss, logits, labels,
                                                                          log_sum_exp, options));
  const Tensor g = grad_loss.to(DType::f32);
  const std::vector<int64_t> count = count_positions(labels, layout, options.ignore_index);
  std::vector<float> row_scale(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    row_scale[n] = count[n] > 0 ? static_cast<float>(static_cast<double>(g.data<float>()[n]) /
                                                     static_cast<double>(count[n]))
                                : 0.0f;
  }
  const float keep = static_cast<float>(1.0 - options.label_smoothing);
  const float spread = static_cast<float>(options.label_smoothing / static_cast<double>(K));
  const int32_t* l = labels.data<int32_t>();
  const float* lse = log_sum_exp.data<float>();
  Tensor grad = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  dispatch_floating(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(logits.raw_data());
    T* dx = static_cast<T*>(grad.raw_data());
    const int64_t rows = N * P;
    parallel_for(rows, std::max<int64_t>(1, detail::kPointwiseGrain / K),
                 [&](int64_t r0, int64_t r1) {
                   for (int64_t r = r0; r < r1; ++r) {
                     const T* row = x + r * K;
                     T* out = dx + r * K;
                     const bool ignored = options.ignore_index && l[r] == *options.ignore_index;
                     const float s = ignored ? 0.0f : row_scale[r / P];
                     if (s == 0.0f) {
                       for (int64_t k = 0; k < K; ++k) out[k] = from_f32<T>(0.0f);
                       continue;
                     }
                     for (int64_t k = 0; k < K; ++k) {
                       const float target = spread + (k == l[r] ? keep : 0.0f);
                       out[k] = from_f32<T>(s * (std::exp(to_f32(row[k]) - lse[r]) - target));
                     }
                   }
                 });
  });
  return grad;
}

Tensor elementwise_loss_per_example(const Tensor& predictions, const Tensor& targets,
                                    const ElementwiseLossOptions& options) {
  const char* op = "elementwise_loss_per_example";
  check_delta(options, op);
  const Tensor t = detail::check_targets(predictions, targets, op);
  const int64_t N = predictions.dim(0), M = predictions.shape().row_numel();
  Tensor loss = Tensor::empty(Shape{N}, DType::f32, predictions.device());
  float* out = loss.data<float>();
  const float* tv = t.data<float>();
  const float delta = static_cast<float>(options.huber_delta);
  dispatch_floating(predictions.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(predictions.raw_data());
    // One range per example: its sum does not depend on the split.
    parallel_for(N, std::max<int64_t>(1, detail::kPointwiseGrain / std::max<int64_t>(M, 1)),
                 [&](int64_t n0, int64_t n1) {
                   for (int64_t n = n0; n < n1; ++n) {
                     double total = 0.0;
                     for (int64_t i = n * M; i < (n + 1) * M; ++i) {
                       total += element_loss(options.kind, to_f32(x[i]), tv[i], delta);
                     }
                     out[n] = M > 0 ? static_cast<float>(total / static_cast<double>(M)) : 0.0f;
                   }
                 });
  });
  return loss;
}

Tensor elementwise_loss_per_example_backward(const Tensor& grad_loss, const Tensor& predictions,
                                             const Tensor& targets,
                                             const ElementwiseLossOptions& options) {
  const char* op = "elementwise_loss_per_example_backward";
  check_delta(options, op);
  const Tensor t = detail::check_targets(predictions, targets, op);
  const int64_t N = predictions.dim(0), M = predictions.shape().row_numel();
  check_grad_loss(grad_loss, N, op);
  const Tensor g = grad_loss.to(DType::f32);
  const float* gv = g.data<float>();
  const float* tv = t.data<float>();
  const float delta = static_cast<float>(options.huber_delta);
  Tensor grad = Tensor::empty(predictions.shape(), predictions.dtype(), predictions.device());
  dispatch_floating(predictions.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(predictions.raw_data());
    T* dx = static_cast<T*>(grad.raw_data());
    parallel_for(
        N, std::max<int64_t>(1, detail::kPointwiseGrain / std::max<int64_t>(M, 1)),
        [&](int64_t n0, int64_t n1) {
          for (int64_t n = n0; n < n1; ++n) {
            const float s = static_cast<float>(static_cast<double>(gv[n]) / static_cast<double>(M));
            for (int64_t i = n * M; i < (n + 1) * M; ++i) {
              dx[i] = from_f32<T>(s * element_grad(options.kind, to_f32(x[i]), tv[i], delta));
            }
          }
        });
  });
  return grad;
}

}  // namespace tandem::kernels
