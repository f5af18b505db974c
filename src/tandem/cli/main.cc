// The `tandem` command: main() adds every subcommand (cli/commands.h lists
// them; each is defined in its own *_command.cc) and runs the one given.
// Errors become one line on stderr and a non-zero exit status (1: the run
// failed, 2: bad command line).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "tandem/base/error.h"
#include "tandem/cli/commands.h"
#include "tandem/cli/parse_errors.h"
#include "tandem/comm/launch.h"
#include "tandem/comm/mpi.h"
#include "tandem/config.h"

namespace tandem::cli {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) items.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

}  // namespace tandem::cli

namespace {

// The last words of a failed command. Under mpirun every rank says which it
// is, then the job is ended (MPI_Finalize would wait for ranks that are
// stuck or gone); the short pause lets the other ranks, told of the failure
// by their communicators, print their own line first.
int fail(const char* kind, const char* message, int status = 1) {
  const int rank = tandem::comm::launched_rank();
  if (tandem::comm::launched_process_count() > 1 && rank >= 0) {
    std::fprintf(stderr, "tandem: %s on rank %d: %s\n", kind, rank, message);
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    tandem::comm::abort_mpi_job(status);
  } else {
    std::fprintf(stderr, "tandem: %s: %s\n", kind, message);
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread starts or MPI does (mpi.h): the library leaves the
  // environment alone; the command owns the process's settings.
  tandem::comm::apply_recommended_mpi_settings();
  CLI::App app{"tandem: data-parallel deep-learning training for multi-device machines", "tandem"};
  app.set_version_flag("--version", std::string("tandem ") + TANDEM_VERSION_STRING);
  app.require_subcommand(1);
  std::vector<tandem::cli::Command> commands = {
      tandem::cli::add_train_command(app),    tandem::cli::add_info_command(app),
      tandem::cli::add_bench_command(app),    tandem::cli::add_data_command(app),
      tandem::cli::add_evaluate_command(app), tandem::cli::add_generate_command(app),
      tandem::cli::add_export_command(app),   tandem::cli::add_report_command(app),
      tandem::cli::add_plan_command(app),     tandem::cli::add_tune_command(app)};
  commands.push_back(tandem::cli::add_tune_search_command(*commands.back().app->get_parent()));
  commands.push_back(tandem::cli::add_plan_scaling_command(*commands[8].app->get_parent()));
  commands.push_back(tandem::cli::add_launch_command(app));
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string names;  // the top-level commands, as registered
    for (const CLI::App* top : app.get_subcommands({})) {
      known = known || top->check_name(argv[1]);
      names += (names.empty() ? "" : ", ") + top->get_name();
    }
    if (!known) {
      const std::string message = std::string("unknown command '") + argv[1] +
                                  "' (expected one of " + names + "; see tandem --help)";
      return fail("error", message.c_str(), 2);
    }
  }
  try {
    app.parse(argc, argv);
    tandem::cli::check_integer_values(app);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Under mpirun too: a rank with a bad command line ends the job.
    const std::string message = tandem::cli::explain(e, app) + " (see tandem --help)";
    return fail("error", message.c_str(), 2);
  }
  try {
    for (const auto& command : commands) {
      if (command.app->parsed()) return command.run();
    }
    return 2;
  } catch (const tandem::Diverged& e) {
    return fail("error", e.what(), 3);  // the settings failed, not the program
  } catch (const tandem::Error& e) {
    return fail("error", e.what());
  } catch (const std::exception& e) {
    return fail("internal error", e.what());
  }
}
