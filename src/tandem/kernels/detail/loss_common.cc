#include "tandem/kernels/detail/loss_common.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/checks.h"
#include "tandem/kernels/detail/float_io.h"

namespace tandem::kernels::detail {
namespace {

// "(1, 2)": the multi-index of flat element i of shape (i < shape.numel()).
std::string position_string(const Shape& shape, int64_t i) {
  std::vector<int64_t> index(static_cast<size_t>(shape.rank()));
  for (int d = shape.rank() - 1; d >= 0; --d) {
    index[static_cast<size_t>(d)] = i % shape[d];
    i /= shape[d];
  }
  std::string out = "(";
  for (size_t d = 0; d < index.size(); ++d) {
    if (d > 0) out += ", ";
    out += std::to_string(index[d]);
  }
  return out + ")";
}

bool same_leading_dims(const Shape& logits, const Shape& labels) {
  if (labels.rank() != logits.rank() - 1) return false;
  for (int d = 0; d < labels.rank(); ++d) {
    if (labels[d] != logits[d]) return false;
  }
  return true;
}

bool is_column(const Shape& shape) {
  return shape.rank() == 2 && shape[1] == 1;
}

}  // namespace

ClassLayout class_layout(const Tensor& logits, const Tensor& labels, const char* op) {
  check_same_device(op, logits, {&labels});
  if (logits.rank() < 2 || !is_floating(logits.dtype())) {
    TANDEM_THROW(ShapeError, op, ": logits must be floating (N, ..., K), got ", logits.to_string());
  }
  const Shape& shape = logits.shape();
  if (shape[-1] < 1) {
    TANDEM_THROW(ShapeError, op, ": logits ", shape.to_string(), " have no classes (K = 0)");
  }
  if (labels.dtype() != DType::i32 || !same_leading_dims(shape, labels.shape())) {
    TANDEM_THROW(ShapeError, op, ": labels must be i32 with the leading dims of logits ",
                 shape.to_string(), " (all but the last), got ", labels.to_string());
  }
  ClassLayout layout;
  layout.examples = shape[0];
  layout.classes = shape[-1];
  layout.positions = labels.shape().row_numel();
  return layout;
}

ClassLayout check_class_labels(const Tensor& logits, const Tensor& labels,
                               std::optional<int32_t> ignore_index, const char* op) {
  const ClassLayout layout = class_layout(logits, labels, op);
  const Tensor host = labels.on_host();
  const int32_t* l = host.data<int32_t>();
  const int64_t n = labels.numel();
  for (int64_t i = 0; i < n; ++i) {
    if (ignore_index && l[i] == *ignore_index) continue;
    if (l[i] < 0 || l[i] >= layout.classes) {
      TANDEM_THROW(InvalidArgument, op, ": label ", l[i], " at position ",
                   position_string(labels.shape(), i), " of labels ", labels.shape().to_string(),
                   " is outside [0, ", layout.classes, ")",
                   ignore_index ? " and is not ignore_index " : "",
                   ignore_index ? std::to_string(*ignore_index) : "");
    }
  }
  return layout;
}

Tensor check_targets(const Tensor& predictions, const Tensor& targets, const char* op) {
  const Shape& p = predictions.shape();
  const Shape& t = targets.shape();
  const bool fits = p.rank() >= 1 && (p == t || (is_column(p) && t.rank() == 1 && t[0] == p[0]) ||
                                      (is_column(t) && p.rank() == 1 && p[0] == t[0]));
  if (!fits || !is_floating(predictions.dtype()) ||
      !(is_floating(targets.dtype()) || targets.dtype() == DType::i32)) {
    TANDEM_THROW(ShapeError, op, ": predictions ", predictions.to_string(), " and targets ",
                 targets.to_string(),
                 " do not fit (expected floating predictions (N, ...) and floating or i32 "
                 "targets of the same shape, or (N,) against (N, 1))");
  }
  return targets.to(DType::f32);
}

void token_cross_entropy(const Tensor& logits, const Tensor& labels, const ClassLayout& layout,
                         std::optional<int32_t> ignore_index, double label_smoothing, double* token,
                         float* log_sum_exp) {
  const int64_t rows = layout.examples * layout.positions, K = layout.classes;
  const int32_t* l = labels.data<int32_t>();
  const double keep = 1.0 - label_smoothing, spread = label_smoothing / static_cast<double>(K);
  dispatch_floating(logits.dtype(), "token_cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(logits.raw_data());
    // Rows are independent and each is written by one range, so the result
    // does not depend on the split.
    parallel_for(rows, std::max<int64_t>(1, kPointwiseGrain / K), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        if (ignore_index && l[r] == *ignore_index) {
          token[r] = 0.0;
          if (log_sum_exp != nullptr) log_sum_exp[r] = 0.0f;
          continue;
        }
        const T* row = x + r * K;
        float max = -INFINITY;
        for (int64_t k = 0; k < K; ++k) max = std::max(max, to_f32(row[k]));
        double total = 0.0, shifted_sum = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const float shifted = to_f32(row[k]) - max;
          total += std::exp(shifted);
          shifted_sum += shifted;
        }
        // lse - x_k = log(total) - (x_k - max): stable even when exp(x_k - lse)
        // underflows to 0.
        const double log_total = std::log(total);
        const double nll = log_total - (to_f32(row[l[r]]) - max);
        double loss = keep * nll;
        if (label_smoothing != 0.0)
          loss += spread * (static_cast<double>(K) * log_total - shifted_sum);
        token[r] = loss;
        if (log_sum_exp != nullptr) log_sum_exp[r] = static_cast<float>(max + log_total);
      }
    });
  });
}

}  // namespace tandem::kernels::detail
