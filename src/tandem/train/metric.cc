#include "tandem/train/metric.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "tandem/base/detail/json_integer.h"
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

Metric make_metric_function(std::string_view name, const MetricOptions& options);

}  // namespace

Metric make_metric(std::string_view name, const MetricOptions& options) {
  Metric m = make_metric_function(name, options);
  m.options = options;
  return m;
}

std::string metrics_to_json(const std::vector<Metric>& metrics) {
  nlohmann::json j = nlohmann::json::array();
  for (const Metric& m : metrics) {
    nlohmann::json e = {{"name", m.name}, {"labels", m.options.labels}, {"builtin", m.builtin}};
    if (m.options.ignore_index) e["ignore_index"] = *m.options.ignore_index;
    j.push_back(e);
  }
  return j.dump();
}

std::vector<Metric> metrics_from_json(const std::string& text) {
  try {
    std::vector<Metric> out;
    for (const nlohmann::json& e : nlohmann::json::parse(text)) {
      if (!e.at("builtin").get<bool>()) {
        TANDEM_THROW(
            InvalidArgument, "metric '", e.at("name").get<std::string>(),
            "' is a program's own; rebuild it with the program that built it (C++ or Python)");
      }
      MetricOptions o{.labels = e.at("labels").get<std::string>()};
      if (e.contains("ignore_index"))
        o.ignore_index =
            tandem::detail::json_integer<int32_t>(e.at("ignore_index"), "'ignore_index'");
      out.push_back(make_metric(e.at("name").get<std::string>(), o));
    }
    return out;
  } catch (const nlohmann::json::exception& e) {
    TANDEM_THROW(InvalidArgument, "a metrics record is malformed: ", e.what());
  }
}

namespace {

Metric make_metric_function(std::string_view name, const MetricOptions& options) {
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
  if (name == "bits_per_byte") {
    // For byte-level tokens: the mean token cross-entropy in bits.
    return {"bits_per_byte",
            [labels, ignore](const Tensor& logits, const data::Element& batch) {
              return kernels::token_cross_entropy_sums(logits, batch.at(labels), ignore);
            },
            [](const MetricSums& t) { return t.sum / t.count / std::log(2.0); }};
  }
  TANDEM_THROW(InvalidArgument, "unknown metric '", name,
               "' (expected accuracy, topK_accuracy such as top5_accuracy, mae, rmse, "
               "perplexity or bits_per_byte)");
}

}  // namespace

double metric_value(const Metric& metric, const MetricSums& total) {
  if (!(total.count > 0.0)) return std::numeric_limits<double>::quiet_NaN();
  return metric.value(total);
}

}  // namespace tandem::train
