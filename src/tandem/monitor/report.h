#pragma once
// `tandem report RUN_DIR`: one self-contained report.html from a run
// directory (no scripts or fonts fetched; charts are inline SVG): loss and
// accuracy curves, throughput over time, each replica's step breakdown,
// device utilisation, memory by category, all-reduce buckets, and the
// findings with the numbers behind them. metrics.jsonl is required;
// summary.json (written when a run ends) is used when present, so a killed
// run still gets a report up to its last step.

#include <string>
#include <vector>

#include "tandem/monitor/run_stats.h"

namespace tandem::monitor {

struct ReportResult {
  std::string path;   // report.html
  int64_t steps = 0;  // step records read
  std::vector<Finding> findings;
  std::vector<std::string> warnings;  // e.g. a missing summary.json
};

// Writes RUN_DIR/report.html (or `output` when given). Throws IoError naming
// what is missing or unreadable: the directory, metrics.jsonl, its run
// header, any step records, or a corrupt line before the last.
ReportResult write_report(const std::string& run_dir, const std::string& output = "");

}  // namespace tandem::monitor
