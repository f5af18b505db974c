#pragma once
// Private: EpochResult <-> JSON, shared by checkpoints (history) and summary.json,
// so both always use the same stable field names. Metrics are flat keys
// (train_accuracy, validation_accuracy) listed in "metrics" for the way back;
// NaN (no validation data) is written as null.

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "tandem/base/detail/json_integer.h"
#include "tandem/base/detail/json_number.h"
#include "tandem/train/trainer.h"

namespace tandem::train {

inline void to_json(nlohmann::json& j, const EpochResult& e) {
  j = {{"epoch", e.epoch},
       {"train_loss", tandem::detail::number_or_null(e.train_loss)},
       {"validation_loss", tandem::detail::number_or_null(e.validation_loss)},
       {"train_examples", e.train_examples},
       {"nonfinite_steps", e.nonfinite_steps},
       {"examples_per_second", e.examples_per_second},
       {"train_seconds", e.train_seconds},
       {"learning_rate", e.learning_rate},
       {"loss_scale", e.loss_scale},
       {"skipped_steps", e.skipped_steps},
       {"steps_since_overflow", e.steps_since_overflow},
       {"noise_scale", tandem::detail::number_or_null(e.noise_scale)}};
  nlohmann::json names = nlohmann::json::array();
  for (const auto& [name, value] : e.train_metrics) {
    names.push_back(name);
    j["train_" + name] = tandem::detail::number_or_null(value);
  }
  for (const auto& [name, value] : e.validation_metrics)
    j["validation_" + name] = tandem::detail::number_or_null(value);
  j["metrics"] = names;
  if (!e.staleness.empty()) {
    j["staleness"] = e.staleness;
    j["mean_staleness"] = tandem::detail::number_or_null(e.mean_staleness());
  }
  if (!e.dropped_examples.empty()) j["dropped_examples"] = e.dropped_examples;
}

inline void from_json(const nlohmann::json& j, EpochResult& e) {
  e.epoch = tandem::detail::json_integer<int64_t>(j.at("epoch"), "'epoch'");
  e.train_loss = tandem::detail::number_or_nan(j, "train_loss");
  e.validation_loss = tandem::detail::number_or_nan(j, "validation_loss");
  e.train_examples = tandem::detail::json_integer_or(j, "train_examples", int64_t{0});
  e.nonfinite_steps = tandem::detail::json_integer_or(j, "nonfinite_steps", int64_t{0});
  e.examples_per_second = j.at("examples_per_second").get<double>();
  e.train_seconds = j.at("train_seconds").get<double>();
  e.learning_rate = j.at("learning_rate").get<double>();
  e.loss_scale = j.value("loss_scale", 1.0);
  e.skipped_steps = tandem::detail::json_integer_or(j, "skipped_steps", int64_t{0});
  e.steps_since_overflow = tandem::detail::json_integer_or(j, "steps_since_overflow", int64_t{0});
  e.noise_scale = tandem::detail::number_or_nan(j, "noise_scale");
  e.staleness.clear();
  e.dropped_examples.clear();
  const auto read_counts = [&](const char* key, std::vector<int64_t>& into) {
    if (!j.contains(key)) return;
    for (const nlohmann::json& n : j.at(key))
      into.push_back(tandem::detail::json_integer<int64_t>(n, key));
  };
  read_counts("staleness", e.staleness);
  read_counts("dropped_examples", e.dropped_examples);
  e.train_metrics.clear();
  e.validation_metrics.clear();
  for (const auto& name : j.value("metrics", nlohmann::json::array())) {
    const std::string n = name.get<std::string>();
    e.train_metrics.emplace_back(n, tandem::detail::number_or_nan(j, ("train_" + n).c_str()));
    if (j.contains("validation_" + n)) {
      e.validation_metrics.emplace_back(
          n, tandem::detail::number_or_nan(j, ("validation_" + n).c_str()));
    }
  }
}

}  // namespace tandem::train
