#pragma once
// Private: EpochResult <-> JSON, shared by checkpoints (history) and summary.json,
// so both always use the same stable field names.

#include <nlohmann/json.hpp>

#include "tandem/train/trainer.h"

namespace tandem::train {

inline void to_json(nlohmann::json& j, const EpochResult& e) {
  j = {{"epoch", e.epoch},
       {"train_loss", e.train_loss},
       {"train_accuracy", e.train_accuracy},
       {"test_loss", e.test_loss},
       {"test_accuracy", e.test_accuracy},
       {"examples_per_second", e.examples_per_second},
       {"train_seconds", e.train_seconds},
       {"learning_rate", e.learning_rate},
       {"loss_scale", e.loss_scale},
       {"skipped_steps", e.skipped_steps},
       {"steps_since_overflow", e.steps_since_overflow}};
}

inline void from_json(const nlohmann::json& j, EpochResult& e) {
  e.epoch = j.at("epoch").get<int64_t>();
  e.train_loss = j.at("train_loss").get<double>();
  e.train_accuracy = j.at("train_accuracy").get<double>();
  e.test_loss = j.at("test_loss").get<double>();
  e.test_accuracy = j.at("test_accuracy").get<double>();
  e.examples_per_second = j.at("examples_per_second").get<double>();
  e.train_seconds = j.at("train_seconds").get<double>();
  e.learning_rate = j.at("learning_rate").get<double>();
  e.loss_scale = j.value("loss_scale", 1.0);
  e.skipped_steps = j.value("skipped_steps", int64_t{0});
  e.steps_since_overflow = j.value("steps_since_overflow", int64_t{0});
}

}  // namespace tandem::train
