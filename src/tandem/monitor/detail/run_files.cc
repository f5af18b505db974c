#include "tandem/monitor/detail/run_files.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "tandem/base/detail/json_integer.h"
#include "tandem/base/error.h"
#include "tandem/monitor/detail/metrics_json.h"
#include "tandem/train/run_directory.h"

namespace tandem::monitor::detail {

namespace fs = std::filesystem;
using nlohmann::json;

RunFiles read_run(const std::string& run_dir) {
  const fs::path dir(run_dir);
  std::error_code error;
  if (!fs::exists(dir, error))
    TANDEM_THROW(IoError, "run directory '", run_dir, "' does not exist");
  if (!fs::is_directory(dir, error))
    TANDEM_THROW(IoError, "'", run_dir, "' is not a directory (give the run directory)");
  const fs::path metrics = train::RunDirectory(dir).metrics();
  std::ifstream in(metrics);
  if (!in) {
    TANDEM_THROW(IoError, "'", metrics.string(),
                 "' is missing: not a tandem run directory, or the run was started with "
                 "--no-monitor");
  }
  RunFiles files;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(std::move(line));
  for (size_t i = 0; i < lines.size(); ++i) {
    json j;
    try {
      j = json::parse(lines[i]);
      const std::string type = j.at("type").get<std::string>();
      if (type == "run") {
        files.run = j;
        ++files.processes;
      } else if (type == "step") {
        StepLine s{step_from_json(j), j};
        if (j.contains("memory")) {
          std::vector<DeviceMemory> snapshot;
          for (const json& m : j.at("memory")) snapshot.push_back(device_memory_from_json(m));
          merge_memory_peaks(files.training_memory, snapshot);
        }
        files.steps[s.record.global_step] = std::move(s);
      } else if (type == "epoch") {
        files.epochs[tandem::detail::json_integer<int64_t>(j.at("epoch"), "'epoch'")] = j;
      } else if (type == "membership") {
        files.membership_changes.push_back(j);
      }
    } catch (const json::exception& e) {
      // A run killed while writing leaves at most its last line cut short,
      // and a resumed run continues after it with a new run header.
      const bool resumed_after =
          i + 1 < lines.size() && lines[i + 1].find("\"type\":\"run\"") != std::string::npos;
      if (i + 1 == lines.size() || resumed_after) {
        files.warnings.push_back(fmt::format(
            "line {} of metrics.jsonl is incomplete (the run was killed while writing it) and "
            "was skipped",
            i + 1));
        continue;
      }
      TANDEM_THROW(IoError, "line ", i + 1, " of '", metrics.string(), "' is corrupt: ", e.what());
    } catch (const Error& e) {  // a value its field cannot hold
      TANDEM_THROW(IoError, "line ", i + 1, " of '", metrics.string(), "' is corrupt: ", e.what());
    }
  }
  if (files.run.is_null()) {
    TANDEM_THROW(IoError, "'", metrics.string(),
                 "' has no run header (its first line should be a {\"type\": \"run\"} object)");
  }
  if (files.steps.empty()) {
    TANDEM_THROW(IoError, "'", metrics.string(),
                 "' has no step records: the run ended before its first step finished");
  }
  const fs::path summary = train::RunDirectory(dir).summary();
  std::ifstream summary_in(summary);
  if (!summary_in) {
    files.warnings.push_back(fmt::format(
        "summary.json is missing: the run did not finish (killed, or still running); the "
        "report covers metrics.jsonl up to global step {}",
        files.steps.rbegin()->first));
  } else {
    try {
      files.summary = json::parse(summary_in);
    } catch (const json::exception& e) {
      files.warnings.push_back(
          fmt::format("summary.json is not valid JSON ({}); ignored", e.what()));
    }
  }
  return files;
}

}  // namespace tandem::monitor::detail
