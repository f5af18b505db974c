#include "tandem/kernels/metrics.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/float_io.h"
#include "tandem/kernels/detail/loss_common.h"

// Legend: N examples, P label positions per example, K classes, M elements
// per example.

namespace tandem::kernels {
namespace {

// Metrics are reductions of a batch's outputs to a few numbers: on a GPU the
// outputs are copied to the host and summed there, in the CPU's order (a
// copy of the logits per batch; a device kernel would save it).
bool on_device(const Tensor& a, const Tensor& b) {
  return a.device().kind != DeviceKind::cpu || b.device().kind != DeviceKind::cpu;
}

using detail::dispatch_floating;
using detail::to_f32;

double count_not_ignored(const Tensor& labels, std::optional<int32_t> ignore_index) {
  if (!ignore_index) return static_cast<double>(labels.numel());
  const int32_t* l = labels.data<int32_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < labels.numel(); ++i) count += l[i] != *ignore_index;
  return static_cast<double>(count);
}

// Per example n: sum over its elements of f(p - t), then the examples' sums
// in order.
template <typename F>
MetricSums error_sums(const Tensor& predictions, const Tensor& targets, const char* op, F f) {
  if (on_device(predictions, targets)) {
    return error_sums(predictions.on_host(), targets.on_host(), op, f);
  }
  const Tensor t = detail::check_targets(predictions, targets, op);
  const int64_t N = predictions.dim(0), M = predictions.shape().row_numel();
  std::vector<double> row(static_cast<size_t>(N), 0.0);
  const float* tv = t.data<float>();
  dispatch_floating(predictions.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(predictions.raw_data());
    parallel_for(N, std::max<int64_t>(1, detail::kPointwiseGrain / std::max<int64_t>(M, 1)),
                 [&](int64_t n0, int64_t n1) {
                   for (int64_t n = n0; n < n1; ++n) {
                     double total = 0.0;
                     for (int64_t i = n * M; i < (n + 1) * M; ++i) {
                       total += f(static_cast<double>(to_f32(x[i])) - tv[i]);
                     }
                     row[n] = total;
                   }
                 });
  });
  MetricSums sums;
  for (double v : row) sums.sum += v;
  sums.count = static_cast<double>(predictions.numel());
  return sums;
}

}  // namespace

MetricSums top_k_correct(const Tensor& logits, const Tensor& labels, int k,
                         std::optional<int32_t> ignore_index) {
  if (on_device(logits, labels))
    return top_k_correct(logits.on_host(), labels.on_host(), k, ignore_index);
  const char* op = "top_k_correct";
  if (k < 1) TANDEM_THROW(InvalidArgument, op, ": k must be >= 1, got ", k);
  const detail::ClassLayout layout = detail::check_class_labels(logits, labels, ignore_index, op);
  const int64_t rows = layout.examples * layout.positions, K = layout.classes;
  const int32_t* l = labels.data<int32_t>();
  std::vector<uint8_t> correct(static_cast<size_t>(rows), 0);
  dispatch_floating(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(logits.raw_data());
    parallel_for(rows, std::max<int64_t>(1, detail::kPointwiseGrain / K),
                 [&](int64_t r0, int64_t r1) {
                   for (int64_t r = r0; r < r1; ++r) {
                     if (ignore_index && l[r] == *ignore_index) continue;
                     const T* row = x + r * K;
                     const float mine = to_f32(row[l[r]]);
                     int64_t larger = 0;
                     for (int64_t c = 0; c < K; ++c) larger += to_f32(row[c]) > mine;
                     // A NaN logit is no prediction (it compares larger than none).
                     correct[r] = larger < k && mine == mine;
                   }
                 });
  });
  MetricSums sums;
  int64_t total = 0;
  for (uint8_t c : correct) total += c;
  sums.sum = static_cast<double>(total);
  sums.count = count_not_ignored(labels, ignore_index);
  return sums;
}

MetricSums absolute_error_sums(const Tensor& predictions, const Tensor& targets) {
  return error_sums(predictions, targets, "absolute_error_sums",
                    [](double d) { return std::abs(d); });
}

MetricSums squared_error_sums(const Tensor& predictions, const Tensor& targets) {
  return error_sums(predictions, targets, "squared_error_sums", [](double d) { return d * d; });
}

MetricSums token_cross_entropy_sums(const Tensor& logits, const Tensor& labels,
                                    std::optional<int32_t> ignore_index) {
  if (on_device(logits, labels)) {
    return token_cross_entropy_sums(logits.on_host(), labels.on_host(), ignore_index);
  }
  const char* op = "token_cross_entropy_sums";
  const detail::ClassLayout layout = detail::check_class_labels(logits, labels, ignore_index, op);
  std::vector<double> token(static_cast<size_t>(layout.examples * layout.positions));
  detail::token_cross_entropy(logits, labels, layout, ignore_index, 0.0, token.data(), nullptr);
  MetricSums sums;
  for (double v : token) sums.sum += v;  // ignored positions hold 0
  sums.count = count_not_ignored(labels, ignore_index);
  return sums;
}

}  // namespace tandem::kernels
