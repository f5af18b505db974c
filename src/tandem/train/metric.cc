#include "tandem/train/metric.h"

#include <cmath>
#include <limits>

#include "tandem/base/error.h"

namespace tandem::train {
namespace {

double ratio(const MetricSums& t) {
  return t.sum / t.count;
}

// K of "topK_accuracy", or 0 when the name has another form.
int top_k_of(std::string_view name) {
  constexpr std::string_view prefix = "top", suffix = "_accuracy";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix))
    return 0;
  const std::string_view digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  int k = 0;
  for (char c : digits) {
    if (c < '0' || c > '9' || k > 100000) return 0;
    k = k * 10 + (c - '0');
  }
  return k;
}

}  // namespace

Metric make_metric(std::string_view name, const MetricOptions& options) {
  const std::string labels = options.labels;
  const std::optional<int32_t> ignore = options.ignore_index;
  if (labels.empty()) TANDEM_THROW(InvalidArgument, "a metric needs a label feature name");
  const int k = name == "accuracy" ? 1 : top_k_of(name);
  if (k > 0) {
    return {std::string(name),
            [labels, ignore, k](const Tensor& logits, const data::Element& batch) {
              return kernels::top_k_correct(logits, batch.at(labels), k, ignore);
            },
            ratio};
  }
  if (name == "mae") {
    return {"mae",
            [labels](const Tensor& predictions, const data::Element& batch) {
              return kernels::absolute_error_sums(predictions, batch.at(labels));
            },
            ratio};
  }
  if (name == "rmse") {
    return {"rmse",
            [labels](const Tensor& predictions, const data::Element& batch) {
              return kernels::squared_error_sums(predictions, batch.at(labels));
            },
            [](const MetricSums& t) { return std::sqrt(t.sum / t.count); }};
  }
  if (name == "perplexity") {
    return {"perplexity",
            [labels, ignore](const Tensor& logits, const data::Element& batch) {
              return kernels::token_cross_entropy_sums(logits, batch.at(labels), ignore);
            },
            [](const MetricSums& t) { return std::exp(t.sum / t.count); }};
  }
  TANDEM_THROW(InvalidArgument, "unknown metric '", name,
               "' (expected accuracy, topK_accuracy such as top5_accuracy, mae, rmse or "
               "perplexity)");
}

double metric_value(const Metric& metric, const MetricSums& total) {
  if (!(total.count > 0.0)) return std::numeric_limits<double>::quiet_NaN();
  return metric.value(total);
}

}  // namespace tandem::train
