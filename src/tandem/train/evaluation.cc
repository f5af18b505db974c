#include "tandem/train/evaluation.h"

#include <filesystem>

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

}  // namespace tandem::train
