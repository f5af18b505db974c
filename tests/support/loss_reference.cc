#include "support/loss_reference.h"

#include <cmath>
#include <limits>

#include "support/reference.h"

namespace tandem::testing {
namespace {

using kernels::ElementwiseLoss;

int64_t classes_of(const Tensor& logits) {
  return logits.shape()[-1];
}

int64_t examples_of(const Tensor& t) {
  return t.rank() == 0 ? 1 : t.dim(0);
}

// The positions of each of N examples that are not ignored.
std::vector<double> counted_positions(const std::vector<int32_t>& l, int64_t N,
                                      std::optional<int32_t> ignore_index) {
  const int64_t P = N == 0 ? 0 : static_cast<int64_t>(l.size()) / N;
  std::vector<double> count(static_cast<size_t>(N), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t p = 0; p < P; ++p) count[n] += !(ignore_index && l[n * P + p] == *ignore_index);
  }
  return count;
}

}  // namespace

std::vector<double> token_cross_entropy_reference(const std::vector<double>& x, int64_t K,
                                                  const std::vector<int32_t>& l,
                                                  std::optional<int32_t> ignore_index,
                                                  double label_smoothing) {
  std::vector<double> token(l.size());
  for (size_t r = 0; r < l.size(); ++r) {
    if (ignore_index && l[r] == *ignore_index) {
      token[r] = std::numeric_limits<double>::quiet_NaN();
      continue;
    }
    const double* row = x.data() + r * K;
    double m = -INFINITY;
    for (int64_t k = 0; k < K; ++k) m = std::max(m, row[k]);
    double s = 0.0;
    for (int64_t k = 0; k < K; ++k) s += std::exp(row[k] - m);
    const double lse = m + std::log(s);
    double loss = 0.0;
    for (int64_t k = 0; k < K; ++k) {
      const double q = label_smoothing / K + (k == l[r] ? 1.0 - label_smoothing : 0.0);
      loss += q * (lse - row[k]);
    }
    token[r] = loss;
  }
  return token;
}

std::vector<double> token_cross_entropy_reference(const Tensor& logits, const Tensor& labels,
                                                  std::optional<int32_t> ignore_index,
                                                  double label_smoothing) {
  return token_cross_entropy_reference(to_doubles(logits), classes_of(logits), labels.to_ints(),
                                       ignore_index, label_smoothing);
}

std::vector<double> cross_entropy_per_example_reference(
    const std::vector<double>& logits, int64_t K, const std::vector<int32_t>& labels, int64_t N,
    const kernels::CrossEntropyOptions& options) {
  const std::vector<double> token = token_cross_entropy_reference(
      logits, K, labels, options.ignore_index, options.label_smoothing);
  const std::vector<double> count = counted_positions(labels, N, options.ignore_index);
  const int64_t P = N == 0 ? 0 : static_cast<int64_t>(labels.size()) / N;
  std::vector<double> loss(static_cast<size_t>(N), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t p = 0; p < P; ++p) {
      if (!std::isnan(token[n * P + p])) loss[n] += token[n * P + p];
    }
    if (count[n] > 0) loss[n] /= count[n];
  }
  return loss;
}

std::vector<double> cross_entropy_per_example_reference(
    const Tensor& logits, const Tensor& labels, const kernels::CrossEntropyOptions& options) {
  return cross_entropy_per_example_reference(to_doubles(logits), classes_of(logits),
                                             labels.to_ints(), examples_of(labels), options);
}

std::vector<double> cross_entropy_per_example_grad_reference(
    const Tensor& logits, const Tensor& labels, const kernels::CrossEntropyOptions& options,
    const std::vector<double>& grad_loss) {
  const int64_t K = classes_of(logits);
  const int64_t N = examples_of(labels), P = N == 0 ? 0 : labels.numel() / N;
  const std::vector<double> x = to_doubles(logits);
  const std::vector<int32_t> l = labels.to_ints();
  const std::vector<double> count = counted_positions(l, N, options.ignore_index);
  const double eps = options.label_smoothing;
  std::vector<double> grad(x.size(), 0.0);
  for (int64_t r = 0; r < N * P; ++r) {
    const int64_t n = r / P;
    if ((options.ignore_index && l[r] == *options.ignore_index) || count[n] == 0) continue;
    const double* row = x.data() + r * K;
    double m = -INFINITY, s = 0.0;
    for (int64_t k = 0; k < K; ++k) m = std::max(m, row[k]);
    for (int64_t k = 0; k < K; ++k) s += std::exp(row[k] - m);
    for (int64_t k = 0; k < K; ++k) {
      const double q = eps / K + (k == l[r] ? 1.0 - eps : 0.0);
      grad[r * K + k] = grad_loss[n] / count[n] * (std::exp(row[k] - m) / s - q);
    }
  }
  return grad;
}

kernels::MetricSums top_k_reference(const std::vector<double>& x, int64_t K,
                                    const std::vector<int32_t>& l, int k,
                                    std::optional<int32_t> ignore_index) {
  kernels::MetricSums s;
  for (size_t r = 0; r < l.size(); ++r) {
    if (ignore_index && l[r] == *ignore_index) continue;
    s.count += 1;
    int larger = 0;
    for (int64_t c = 0; c < K; ++c) larger += x[r * K + c] > x[r * K + l[r]];
    s.sum += larger < k;
  }
  return s;
}

double elementwise_loss_reference(ElementwiseLoss kind, double x, double t, double delta) {
  const double d = x - t;
  switch (kind) {
    case ElementwiseLoss::binary_cross_entropy_with_logits:
      // -(t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))), written directly.
      return -(t * std::log(1.0 / (1.0 + std::exp(-x))) +
               (1.0 - t) * std::log(1.0 / (1.0 + std::exp(x))));
    case ElementwiseLoss::mean_squared_error:
      return d * d;
    case ElementwiseLoss::mean_absolute_error:
      return std::abs(d);
    case ElementwiseLoss::huber:
      return std::abs(d) < delta ? 0.5 * d * d : delta * (std::abs(d) - 0.5 * delta);
  }
  return 0.0;
}

double elementwise_grad_reference(ElementwiseLoss kind, double x, double t, double delta) {
  const double d = x - t;
  const double sign = d > 0 ? 1.0 : (d < 0 ? -1.0 : 0.0);
  switch (kind) {
    case ElementwiseLoss::binary_cross_entropy_with_logits:
      return 1.0 / (1.0 + std::exp(-x)) - t;
    case ElementwiseLoss::mean_squared_error:
      return 2.0 * d;
    case ElementwiseLoss::mean_absolute_error:
      return sign;
    case ElementwiseLoss::huber:
      return std::abs(d) <= delta ? d : delta * sign;
  }
  return 0.0;
}

std::vector<double> elementwise_loss_per_example_reference(
    const std::vector<double>& x, const std::vector<double>& t, int64_t N,
    const kernels::ElementwiseLossOptions& options) {
  const int64_t M = N == 0 ? 0 : static_cast<int64_t>(x.size()) / N;
  std::vector<double> loss(static_cast<size_t>(N), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = n * M; i < (n + 1) * M; ++i) {
      loss[n] += elementwise_loss_reference(options.kind, x[i], t[i], options.huber_delta);
    }
    if (M > 0) loss[n] /= static_cast<double>(M);
  }
  return loss;
}

std::vector<double> elementwise_loss_per_example_reference(
    const Tensor& predictions, const Tensor& targets,
    const kernels::ElementwiseLossOptions& options) {
  return elementwise_loss_per_example_reference(to_doubles(predictions), to_doubles(targets),
                                                predictions.dim(0), options);
}

std::vector<double> elementwise_loss_per_example_grad_reference(
    const Tensor& predictions, const Tensor& targets,
    const kernels::ElementwiseLossOptions& options, const std::vector<double>& grad_loss) {
  const int64_t N = predictions.dim(0), M = predictions.shape().row_numel();
  const std::vector<double> x = to_doubles(predictions), t = to_doubles(targets);
  std::vector<double> grad(x.size(), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = n * M; i < (n + 1) * M; ++i) {
      grad[i] = grad_loss[n] / static_cast<double>(M) *
                elementwise_grad_reference(options.kind, x[i], t[i], options.huber_delta);
    }
  }
  return grad;
}

}  // namespace tandem::testing
