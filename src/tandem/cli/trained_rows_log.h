#pragma once
// For the elastic tests' exactly-once check (tests/distribute/elastic_check.py):
// with TANDEM_TEST_TRAINED_ROWS=PREFIX in the environment, `tandem train`
// appends a line per step to PREFIX.<pid>: the epoch, the global step, the
// membership generation and a hash of each row of this process's input
// feature. The library knows nothing of it; the CLI reads the variable.

#include <functional>
#include <string>

#include "tandem/train/trainer.h"

namespace tandem::cli {

// The on_batch callback that writes the log, or an empty function when the
// variable is not set.
std::function<void(const train::TrainedBatch&)> trained_rows_log(std::string input_feature);

}  // namespace tandem::cli
