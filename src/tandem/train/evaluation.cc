#include "tandem/train/evaluation.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tandem/base/error.h"

namespace tandem::train {

Checkpoint load_trainer_checkpoint(const std::string& path) {
  if (!std::filesystem::exists(path)) TANDEM_THROW(IoError, "no checkpoint at '", path, "'");
  Checkpoint c = load_checkpoint(path);
  if (c.metadata.count("format") == 0 || c.meta("format") != kTrainerCheckpointFormat) {
    TANDEM_THROW(IoError, "'", path, "' is not a trainer checkpoint of this version (format ",
                 c.metadata.count("format") ? c.meta("format") : std::string("missing"),
                 ", expected ", kTrainerCheckpointFormat, ")");
  }
  return c;
}

CheckpointPosition checkpoint_position(const distribute::EngineState& state,
                                       const std::string& source) {
  CheckpointPosition p;
  try {
    p.epoch = state.meta_integer("epoch");
    p.step = state.meta_integer("step");
    p.global_step = state.meta_integer("global_step");
  } catch (const IoError& e) {
    TANDEM_THROW(IoError, "checkpoint '", source, "' has a malformed position: ", e.what());
  }
  if (p.epoch < 0 || p.step < 0 || p.global_step < 0) {
    TANDEM_THROW(IoError, "checkpoint '", source, "' has a negative position (epoch ", p.epoch,
                 ", step ", p.step, ", global step ", p.global_step, ")");
  }
  return p;
}

std::vector<std::string> checkpoint_class_names(const Checkpoint& checkpoint) {
  const auto it = checkpoint.metadata.find("class_names");
  if (it == checkpoint.metadata.end()) return {};
  try {
    return nlohmann::json::parse(it->second).get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    TANDEM_THROW(IoError, "checkpoint has malformed class names: ", e.what());
  }
}

}  // namespace tandem::train
