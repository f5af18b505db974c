// `tandem report RUN_DIR`: writes report.html from a run directory.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "tandem/base/error.h"
#include "tandem/cli/commands.h"
#include "tandem/monitor/report.h"
#include "tandem/monitor/step_schema.h"

namespace tandem::cli {

Command add_report_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "report", "Write report.html (charts, step breakdown, findings) for a training run");
  struct Options {
    std::string run_dir;
    std::string output;
    bool quiet = false;
    bool schema = false;
  };
  auto o = std::make_shared<Options>();
  command->add_option("run_dir", o->run_dir, "Run directory (tandem train --output)");
  command->add_flag("--schema", o->schema,
                    "Print the fields of metrics.jsonl's step lines (Markdown) and exit");
  command->add_option("--output,-o", o->output, "Where to write (default: RUN_DIR/report.html)");
  command->add_flag("--quiet,-q", o->quiet, "Print only warnings and errors");
  return {command, [o]() {
            if (o->schema) {
              fmt::print("{}", monitor::step_schema_markdown());
              return 0;
            }
            if (o->run_dir.empty())
              TANDEM_THROW(InvalidArgument,
                           "report needs the run directory (tandem train --output)");
            const monitor::ReportResult r = monitor::write_report(o->run_dir, o->output);
            for (const std::string& w : r.warnings) fmt::print(stderr, "tandem: warning: {}\n", w);
            if (!o->quiet) {
              for (const monitor::Finding& f : r.findings) fmt::print("  {}\n", f.message);
              fmt::print("report of {} steps written to {}\n", r.steps, r.path);
            }
            return 0;
          }};
}

}  // namespace tandem::cli
