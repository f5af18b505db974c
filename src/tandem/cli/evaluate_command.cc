// `tandem evaluate RUN_DIR`: the loss and accuracy of a run's checkpoint on
// the Fashion-MNIST test set, with the model and precision it was trained in.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/cli/commands.h"
#include "tandem/nn/models.h"
#include "tandem/precision/policy.h"
#include "tandem/train/evaluation.h"

namespace tandem::cli {
namespace {

struct EvaluateOptions {
  std::string run_dir;
  std::string data_dir = data::default_fashion_mnist_dir();
  std::optional<int64_t> test_examples;  // unset: the run's; 0: all
  int64_t batch_size = 1000;
  int threads = 0;  // 0: one per physical core
  bool json = false;
};

// summary.json's "config" section, or null when the run has none (killed
// before its end, or older).
nlohmann::json run_config(const std::filesystem::path& run_dir) {
  std::ifstream in(run_dir / "summary.json");
  if (!in) return nullptr;
  try {
    return nlohmann::json::parse(in).value("config", nlohmann::json());
  } catch (const nlohmann::json::exception&) {
    return nullptr;  // a damaged summary: fall back to the checkpoint alone
  }
}

int run_evaluate(const EvaluateOptions& o) {
  if (o.threads < 0) {
    TANDEM_THROW(InvalidArgument, "--threads must be 0 (one per physical core) or more, got ",
                 o.threads);
  }
  if (o.test_examples && *o.test_examples < 0)
    TANDEM_THROW(InvalidArgument, "--test-examples must be 0 (all) or more, got ",
                 *o.test_examples);
  if (o.batch_size < 1)
    TANDEM_THROW(InvalidArgument, "evaluation batch size must be at least 1, got ", o.batch_size);
  if (!std::filesystem::is_directory(o.run_dir))
    TANDEM_THROW(InvalidArgument, "run directory '", o.run_dir, "' does not exist");
  const std::string path = (std::filesystem::path(o.run_dir) / "checkpoint.tckpt").string();
  const train::Checkpoint checkpoint = train::load_trainer_checkpoint(path);
  const nlohmann::json config = run_config(o.run_dir);
  // The checkpoint's record, else the run's summary (checkpoints written
  // before they recorded precision), else float32 with a warning.
  const auto setting = [&](const char* key) -> std::optional<std::string> {
    if (checkpoint.metadata.count(key)) return checkpoint.meta(key);
    if (config.is_object() && config.contains(key) && config.at(key).is_string())
      return config.at(key).get<std::string>();
    return std::nullopt;
  };
  const std::optional<std::string> recorded_policy = setting("precision");
  if (!recorded_policy) {
    fmt::print(stderr,
               "tandem: warning: '{}' records no precision and the run has no summary.json; "
               "evaluating as float32\n",
               path);
  }
  const precision::Policy policy = precision::parse_policy(recorded_policy.value_or("float32"));
  nn::ModelOptions model_options = precision::model_options(policy);
  model_options.compute_dtype = parse_dtype(
      setting("compute_dtype").value_or(std::string(dtype_name(precision::matrix_dtype(policy)))));
  const std::string model_name = checkpoint.meta("model");
  const std::shared_ptr<nn::Module> model = nn::make_model(model_name, model_options);
  train::load_model_state(checkpoint, *model);

  const data::FashionMnist fashion = data::load_fashion_mnist(o.data_dir);
  data::LabeledImages test = fashion.test;
  // By default the test examples the run evaluated on (--test-examples).
  int64_t examples = o.test_examples.value_or(0);
  if (!o.test_examples && config.is_object() && config.contains("test_examples")) {
    const nlohmann::json& recorded = config.at("test_examples");
    if (recorded.is_number_integer()) examples = recorded.get<int64_t>();
    if (recorded.is_string()) examples = parse_integer(recorded.get<std::string>()).value_or(0);
  }
  if (examples > 0 && examples < test.size())
    test = {test.images.slice(0, examples), test.labels.slice(0, examples)};
  NumThreadsScope threads(o.threads > 0 ? o.threads : std::max(1, cpu_info().physical_cores));
  const auto start = std::chrono::steady_clock::now();
  const train::EvalSums sums = train::evaluate_rows(*model, test, 0, test.size(), o.batch_size);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (test.size() == 0) TANDEM_THROW(InvalidArgument, "no test examples to evaluate on");
  const double n = static_cast<double>(test.size());
  const double loss = sums.loss / n;
  const double accuracy = static_cast<double>(sums.correct) / n;
  // Where training stood when the checkpoint was written.
  const int64_t epochs_done = std::stoll(checkpoint.meta("epoch"));
  const int64_t step = std::stoll(checkpoint.meta("step"));
  if (o.json) {
    fmt::print("{}\n", nlohmann::json{{"model", model_name},
                                      {"precision", precision::policy_name(policy)},
                                      {"checkpoint", path},
                                      {"epochs_done", epochs_done},
                                      {"step_in_epoch", step},
                                      {"examples", test.size()},
                                      {"test_loss", loss},
                                      {"test_accuracy", accuracy},
                                      {"seconds", seconds}}
                           .dump());
  } else {
    fmt::print(
        "{} ({}) from {} after {} epoch(s){}: test loss {:.4f}, accuracy {:.2f}% on {} examples "
        "({:.2f} s)\n",
        model_name, precision::policy_name(policy), path, epochs_done,
        step > 0 ? fmt::format(" and {} step(s)", step) : std::string(), loss, 100.0 * accuracy,
        test.size(), seconds);
  }
  return 0;
}

}  // namespace

Command add_evaluate_command(CLI::App& app) {
  CLI::App* command =
      app.add_subcommand("evaluate", "Test-set loss and accuracy of a training run's checkpoint");
  auto o = std::make_shared<EvaluateOptions>();
  command->add_option("run_dir", o->run_dir, "Run directory (tandem train --output)")->required();
  command->add_option("--data-dir", o->data_dir, "Directory with the Fashion-MNIST IDX files")
      ->capture_default_str();
  command->add_option("--test-examples", o->test_examples,
                      "Use only the first N test examples (default: as many as the run used; 0: "
                      "all)");
  command->add_option("--batch-size,--batch", o->batch_size, "Evaluation batch size")
      ->capture_default_str();
  command->add_option("--threads", o->threads, "Threads (default: one per physical core)");
  command->add_flag("--json", o->json, "Print one JSON object");
  return {command, [o]() { return run_evaluate(*o); }};
}

}  // namespace tandem::cli
