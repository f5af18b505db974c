#pragma once
// A run directory's monitor files as `tandem report` reads them: metrics.jsonl
// (a line cut short by a kill is skipped with a warning, any other bad line
// is an error naming it) and summary.json (missing or invalid: a warning).
// Private: nlohmann/json stays out of public headers.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/monitor/step_schema.h"

namespace tandem::monitor::detail {

struct StepLine {
  StepRecord record;
  nlohmann::json extra;  // the whole line, for derived fields
};

struct RunFiles {
  nlohmann::json run;                 // the latest run header (a resumed run's own)
  int processes = 0;                  // run headers: 1 + the times the run was resumed
  std::map<int64_t, StepLine> steps;  // by global step; a resumed run's repeats replace
  std::map<int64_t, nlohmann::json> epochs;
  nlohmann::json summary;  // null when summary.json is missing
  // Each device's peaks over the step lines (training's; the epoch lines'
  // include evaluation) and its latest in-use figures.
  std::vector<DeviceMemory> training_memory;
  std::vector<nlohmann::json> membership_changes;  // an elastic job's
  std::vector<std::string> warnings;
};

// Throws IoError naming the file when the directory is not a run's.
RunFiles read_run(const std::string& run_dir);

}  // namespace tandem::monitor::detail
