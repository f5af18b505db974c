#pragma once
// summary.json: a run's configuration and final figures under stable names
// (train_loss, validation_loss, train_<metric>, validation_<metric>,
// test_loss and test_accuracy (the validation figures, under the names
// earlier versions used), examples_per_second, wall_seconds, epochs,
// interrupted, input_exhausted, history, config).

#include <map>
#include <string>

#include "tandem/train/trainer.h"

namespace tandem::train {

// Writes the summary atomically. `extra_config` holds settings the trainer
// does not know (threads, data directory, ...), as JSON-ready strings;
// `sections` are top-level objects from layers above (name -> JSON text,
// e.g. the monitor's figures and findings). Throws InvalidArgument for a
// section that is not valid JSON.
void write_summary(const std::string& path, const TrainConfig& config, const ModelSpec& model,
                   const TrainResult& result,
                   const std::map<std::string, std::string>& extra_config,
                   const std::map<std::string, std::string>& sections = {});

}  // namespace tandem::train
