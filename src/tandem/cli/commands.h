#pragma once
// The `tandem` command's subcommands. Each add_* registers its options on the
// app and returns it with the function to run once parsing succeeded; that
// function returns the process exit status and may throw tandem::Error.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tandem/data/fashion_mnist.h"

namespace CLI {
class App;
}

namespace tandem::cli {

struct Command {
  CLI::App* app;             // the subcommand
  std::function<int()> run;  // called when it was given
};

Command add_train_command(CLI::App& app);
Command add_info_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_data_command(CLI::App& app);
Command add_report_command(CLI::App& app);
Command add_evaluate_command(CLI::App& app);
Command add_generate_command(CLI::App& app);
Command add_export_command(CLI::App& app);
Command add_launch_command(CLI::App& app);
// `plan memory` (its command is the memory subcommand of plan).
Command add_plan_command(CLI::App& app);
// `plan scaling`, under the `plan` command.
Command add_plan_scaling_command(CLI::App& plan);
// `tune batch-size` (its command is the batch-size subcommand of tune).
Command add_tune_command(CLI::App& app);
// `tune search`, under the `tune` command.
Command add_tune_search_command(CLI::App& tune);
// The bench subcommands about memory and collectives, under `bench`.
std::vector<Command> add_bench_comm_commands(CLI::App& bench);
Command add_bench_pipeline_command(CLI::App& bench);
Command add_bench_scaling_command(CLI::App& bench);
Command add_bench_peak_command(CLI::App& bench);
Command add_bench_monitor_command(CLI::App& bench);
Command add_bench_sync_async_command(CLI::App& bench);

// n random 28x28x1 images with labels 0-9 (seeded): training input for
// benchmarks that measure the step, not the data.
data::LabeledImages synthetic_images(int64_t n);

// Parses a comma-separated list ("1,2,4").
std::vector<std::string> split_list(const std::string& text);

// Whether --model names a model file (FILE.toml, or any file that exists)
// rather than a built-in model.
bool is_model_file(const std::string& model);

}  // namespace tandem::cli
