#pragma once
// Metrics for the Trainer: each replica measures partial sums on its rows
// (a sum and a count, as doubles), the Trainer adds them over every replica
// and process exactly (distribute/agreement.h), and the metric turns the
// totals into its value, so a metric over N replicas is the metric over the
// whole dataset, not a mean of per-replica means.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/data/element.h"
#include "tandem/kernels/metrics.h"
#include "tandem/tensor/tensor.h"

namespace tandem::train {

using kernels::MetricSums;

struct MetricOptions {
  std::string labels = "label";         // the batch feature holding the targets
  std::optional<int32_t> ignore_index;  // accuracy, perplexity: positions left out
};

struct Metric {
  // "accuracy", "top5_accuracy", "mae", "rmse", "perplexity", "bits_per_byte": reported as
  // train_<name> and validation_<name>.
  std::string name;
  // This replica's partial sums for its rows; outputs are the model's.
  std::function<MetricSums(const Tensor& outputs, const data::Element& batch)> measure;
  // The metric from the totals over every replica (count > 0).
  std::function<double(const MetricSums& total)> value;
  MetricOptions options;  // what make_metric built it with
  bool builtin = true;    // false: a program's own (not rebuilt from JSON)
};

// accuracy and topK_accuracy (K >= 1): logits (N, ..., K) against i32 labels
// (N, ...); mae, rmse: predictions against targets with the same elements;
// perplexity: exp of the mean token cross-entropy of logits against labels;
// bits_per_byte: that mean in bits (for byte-level tokens).
// Throws InvalidArgument naming the known metrics for another name.
Metric make_metric(std::string_view name, const MetricOptions& options = {});

// Built-in metrics as JSON ([{"name", "labels", "ignore_index"}]) and back,
// for checkpoints; metrics_from_json throws InvalidArgument for a program's
// own metric or bad JSON.
std::string metrics_to_json(const std::vector<Metric>& metrics);
std::vector<Metric> metrics_from_json(const std::string& json);

// The metric's value, or NaN when nothing was counted.
double metric_value(const Metric& metric, const MetricSums& total);

}  // namespace tandem::train
