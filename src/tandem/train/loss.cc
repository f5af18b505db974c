#include "tandem/train/loss.h"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tandem/autograd/functions.h"
#include "tandem/base/detail/json_integer.h"
#include "tandem/base/error.h"

namespace tandem::train {
namespace {

// "name" or "name(setting=value, ...)" with the settings that differ from
// the defaults, so that equal names mean equal losses.
std::string describe(std::string_view name, const LossOptions& o, bool classification, bool huber) {
  std::vector<std::string> settings;
  if (o.labels != "label") settings.push_back("labels=" + o.labels);
  if (classification && o.ignore_index)
    settings.push_back(fmt::format("ignore_index={}", *o.ignore_index));
  if (classification && o.label_smoothing != 0.0)
    settings.push_back(fmt::format("label_smoothing={}", o.label_smoothing));
  if (huber && o.delta != 1.0) settings.push_back(fmt::format("delta={}", o.delta));
  if (settings.empty()) return std::string(name);
  return fmt::format("{}({})", name, fmt::join(settings, ", "));
}

Loss make_loss_function(std::string_view name, const LossOptions& options) {
  if (!(options.label_smoothing >= 0.0 && options.label_smoothing < 1.0)) {
    TANDEM_THROW(InvalidArgument, "label smoothing must be in [0, 1), got ",
                 options.label_smoothing);
  }
  if (!(options.delta > 0.0) || !std::isfinite(options.delta))
    TANDEM_THROW(InvalidArgument, "the huber delta must be positive, got ", options.delta);
  if (options.labels.empty()) TANDEM_THROW(InvalidArgument, "a loss needs a label feature name");
  const std::string labels = options.labels;
  if (name == "softmax_cross_entropy") {
    const CrossEntropyOptions ce{.ignore_index = options.ignore_index,
                                 .label_smoothing = options.label_smoothing};
    return {describe(name, options, true, false),
            [labels, ce](const Variable& logits, const data::Element& batch) {
              const Tensor& targets = batch.at(labels);
              // The data's mistake, said as such (the operator's message
              // spoke of dtypes and leading dimensions).
              if (targets.dtype() != DType::i32) {
                TANDEM_THROW(InvalidArgument,
                             "the loss softmax_cross_entropy takes integer class "
                             "labels, but '",
                             labels, "' is ", dtype_name(targets.dtype()),
                             " (regression targets? use mean_squared_error; class ids stored as "
                             "floats? make the feature i32)");
              }
              return softmax_cross_entropy_per_example(logits, targets, ce);
            }};
  }
  if (name == "binary_cross_entropy") {
    return {describe(name, options, false, false),
            [labels](const Variable& logits, const data::Element& batch) {
              return binary_cross_entropy_with_logits_per_example(logits, batch.at(labels));
            }};
  }
  if (name == "mean_squared_error") {
    return {describe(name, options, false, false),
            [labels](const Variable& predictions, const data::Element& batch) {
              return mean_squared_error_per_example(predictions, batch.at(labels));
            }};
  }
  if (name == "mean_absolute_error") {
    return {describe(name, options, false, false),
            [labels](const Variable& predictions, const data::Element& batch) {
              return mean_absolute_error_per_example(predictions, batch.at(labels));
            }};
  }
  if (name == "huber") {
    const double delta = options.delta;
    return {describe(name, options, false, true),
            [labels, delta](const Variable& predictions, const data::Element& batch) {
              return huber_per_example(predictions, batch.at(labels), delta);
            }};
  }
  TANDEM_THROW(InvalidArgument, "unknown loss '", name, "' (expected ",
               fmt::format("{}", fmt::join(loss_names(), ", ")),
               ", or Keras's sparse_categorical_crossentropy, binary_crossentropy, mse, mae)");
}

}  // namespace

std::vector<std::string> loss_names() {
  return {"softmax_cross_entropy", "binary_cross_entropy", "mean_squared_error",
          "mean_absolute_error", "huber"};
}

std::string canonical_loss_name(std::string_view name) {
  // Not categorical_crossentropy: Keras's takes one-hot labels.
  static const std::pair<std::string_view, std::string_view> keras[] = {
      {"sparse_categorical_crossentropy", "softmax_cross_entropy"},
      {"binary_crossentropy", "binary_cross_entropy"},
      {"mse", "mean_squared_error"},
      {"mae", "mean_absolute_error"}};
  for (const auto& [alias, canonical] : keras)
    if (name == alias) return std::string(canonical);
  return std::string(name);
}

Loss make_loss(std::string_view given, const LossOptions& options) {
  const std::string name = canonical_loss_name(given);
  Loss loss = make_loss_function(name, options);
  loss.kind = name;
  loss.options = options;
  return loss;
}

std::string loss_to_json(const Loss& loss) {
  nlohmann::json j = {{"kind", loss.kind},
                      {"labels", loss.options.labels},
                      {"label_smoothing", loss.options.label_smoothing},
                      {"delta", loss.options.delta}};
  if (loss.options.ignore_index) j["ignore_index"] = *loss.options.ignore_index;
  return j.dump();
}

Loss loss_from_json(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    const std::string kind = j.at("kind").get<std::string>();
    if (kind == "custom") {
      TANDEM_THROW(
          InvalidArgument,
          "the loss is a program's own; rebuild it with the program that built it (C++ or Python)");
    }
    LossOptions o{.labels = j.at("labels").get<std::string>(),
                  .label_smoothing = j.at("label_smoothing").get<double>(),
                  .delta = j.at("delta").get<double>()};
    if (j.contains("ignore_index"))
      o.ignore_index =
          tandem::detail::json_integer<int32_t>(j.at("ignore_index"), "'ignore_index'");
    return make_loss(kind, o);
  } catch (const nlohmann::json::exception& e) {
    TANDEM_THROW(InvalidArgument, "a loss record is malformed: ", e.what());
  }
}

}  // namespace tandem::train
