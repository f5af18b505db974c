// `tandem evaluate RUN_DIR`: the loss and metrics of a run's checkpoint on
// its validation data (or other data), with the model, precision, loss and
// metrics it was trained with.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/parse_number.h"
#include "tandem/cli/commands.h"
#include "tandem/cli/resume_arguments.h"
#include "tandem/cli/run_setup.h"
#include "tandem/data/input_spec.h"
#include "tandem/precision/policy.h"
#include "tandem/train/evaluation.h"
#include "tandem/train/run_directory.h"
#include "tandem/train/trainer.h"

namespace tandem::cli {
namespace {

struct EvaluateOptions {
  std::string run_dir;
  std::string data;                      // a data specification; empty: the run's validation data
  std::optional<std::string> data_dir;   // unset: the run's, else the default
  std::optional<int64_t> test_examples;  // unset: the run's; 0: all
  int64_t batch_size = 1000;
  std::optional<int> threads;  // unset: one per physical core
  bool allow_oversubscription = false;
  bool json = false;
};

// summary.json's "config" section, or null when the run has none (killed
// before its end, or older).
nlohmann::json run_config(const std::filesystem::path& run_dir) {
  std::ifstream in(train::RunDirectory(run_dir).summary());
  if (!in) return nullptr;
  try {
    return nlohmann::json::parse(in).value("config", nlohmann::json());
  } catch (const nlohmann::json::exception&) {
    return nullptr;  // a damaged summary: fall back to the checkpoint alone
  }
}

// Whether the checkpoint's recorded command line gave --data: what tells a
// run on other data from a Fashion-MNIST one when summary.json is missing.
bool trained_on_data_spec(const train::Checkpoint& checkpoint, const std::string& path) {
  const std::optional<std::vector<std::string>> args =
      recorded_arguments(checkpoint.metadata, path);
  return args && std::any_of(args->begin(), args->end(),
                             [](const std::string& a) { return a.starts_with("--data="); });
}

// The data to evaluate on: --data, else the run's validation data
// (summary.json), else Fashion-MNIST's test set (the first N examples, as
// many as the run used unless --test-examples says) for a run that trained
// on Fashion-MNIST. A run on other data without validation data is refused:
// its training data would report training figures as evaluation ones.
struct EvaluationData {
  data::Dataset examples = data::Dataset::range(0);
  std::string description;
  std::optional<data::PaddedBatchOptions> padding;
};

std::string recorded_validation_data(const EvaluateOptions& o, const nlohmann::json& config,
                                     const train::Checkpoint& checkpoint) {
  const auto text = [&](const char* key) -> std::string {
    if (!config.is_object() || !config.contains(key) || !config.at(key).is_string()) return "";
    return config.at(key).get<std::string>();
  };
  if (const std::string validation = text("validation_data"); !validation.empty())
    return validation;
  if (const std::string training = text("data"); !training.empty()) {
    TANDEM_THROW(InvalidArgument, "run '", o.run_dir, "' trained on '", training,
                 "' without --validation-data: say what to evaluate on with --data SPEC (its "
                 "training data gives training figures, not evaluation ones)");
  }
  // A run from a program (Python's fit) records neither its data nor
  // Fashion-MNIST's folder.
  if (config.is_object() && !config.contains("data_dir")) {
    TANDEM_THROW(InvalidArgument, "run '", o.run_dir,
                 "' does not record its data (a program's run, such as Python's fit): say what "
                 "to evaluate on with --data SPEC");
  }
  if (!config.is_object() &&
      trained_on_data_spec(checkpoint, train::RunDirectory(o.run_dir).checkpoint())) {
    TANDEM_THROW(InvalidArgument, "run '", o.run_dir,
                 "' has no summary.json (stopped before its end) and trained on --data: say what "
                 "to evaluate on with --data SPEC");
  }
  return "";
}

EvaluationData evaluation_data(const EvaluateOptions& o, const nlohmann::json& config,
                               const train::Checkpoint& checkpoint) {
  const std::string spec_path =
      o.data.empty() ? recorded_validation_data(o, config, checkpoint) : o.data;
  if (!spec_path.empty()) {
    if (o.test_examples)
      TANDEM_THROW(InvalidArgument, "--test-examples selects Fashion-MNIST test examples");
    if (o.data_dir)
      TANDEM_THROW(InvalidArgument, "--data-dir names Fashion-MNIST's folder; '", spec_path,
                   "' says which data to read");
    data::InputSpec spec = data::read_input_spec(spec_path);
    spec.shuffle = 0;
    use_model_classes(spec, train::checkpoint_class_names(checkpoint), "'" + spec_path + "'");
    EvaluationData d{data::make_input(spec, 0), spec_path, std::nullopt};
    if (spec.needs_padding()) d.padding = spec.padding();
    return d;
  }
  // The directory the run trained from (a copy of Fashion-MNIST elsewhere
  // is as likely as the default one).
  std::string data_dir = o.data_dir.value_or(data::default_fashion_mnist_dir());
  if (!o.data_dir && config.is_object() && config.contains("data_dir") &&
      config.at("data_dir").is_string())
    data_dir = config.at("data_dir").get<std::string>();
  const data::FashionMnist fashion = data::load_fashion_mnist(data_dir);
  data::LabeledImages test = fashion.test;
  int64_t examples = o.test_examples.value_or(0);
  if (!o.test_examples && config.is_object() && config.contains("test_examples")) {
    const nlohmann::json& recorded = config.at("test_examples");
    if (recorded.is_number_integer()) examples = recorded.get<int64_t>();
    if (recorded.is_string())
      examples = parse_number<int64_t>(recorded.get<std::string>()).value_or(0);
  }
  if (examples > 0 && examples < test.size())
    test = {test.images.slice(0, examples), test.labels.slice(0, examples)};
  if (test.size() == 0) TANDEM_THROW(InvalidArgument, "no test examples to evaluate on");
  return {data::as_dataset(test), "Fashion-MNIST test set in " + data_dir, std::nullopt};
}

int run_evaluate(const EvaluateOptions& o) {
  if (o.threads && *o.threads < 1) {
    TANDEM_THROW(InvalidArgument,
                 "--threads must be at least 1 (omit it for one per physical core), got ",
                 *o.threads);
  }
  if (o.test_examples && *o.test_examples < 0)
    TANDEM_THROW(InvalidArgument, "--test-examples must be 0 (all) or more, got ",
                 *o.test_examples);
  if (o.batch_size < 1)
    TANDEM_THROW(InvalidArgument, "--batch-size must be at least 1, got ", o.batch_size);
  if (!std::filesystem::is_directory(o.run_dir))
    TANDEM_THROW(InvalidArgument, "run directory '", o.run_dir, "' does not exist");
  const std::string path = train::RunDirectory(o.run_dir).checkpoint();
  const train::Checkpoint checkpoint = train::load_trainer_checkpoint(path);
  const nlohmann::json config = run_config(o.run_dir);
  // The model, loss and metrics the run trained with, rebuilt from the checkpoint.
  train::ModelFactory saved = train::saved_model(checkpoint);
  const train::ModelSpec spec = saved.spec;
  const EvaluationData data = evaluation_data(o, config, checkpoint);
  const int threads = o.threads.value_or(std::max(1, cpu_info().physical_cores));
  train::Trainer trainer({.eval_batch_size = o.batch_size,
                          .strategy = {.threads_per_device = threads,
                                       .allow_oversubscription = o.allow_oversubscription},
                          .input_feature = checkpoint.meta("input_feature"),
                          .loss = train::loss_from_json(checkpoint.meta("loss_record")),
                          .metrics = train::metrics_from_json(checkpoint.meta("metrics_record")),
                          .padding = data.padding},
                         std::move(saved));
  train::load_model_state(checkpoint, trainer.model());
  const auto start = std::chrono::steady_clock::now();
  const train::EvalResult result = trainer.evaluate(data.examples);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (result.examples == 0) TANDEM_THROW(InvalidArgument, "no examples to evaluate on");
  // Where training stood when the checkpoint was written.
  const train::CheckpointPosition position = train::checkpoint_position(checkpoint, path);
  const int64_t epochs_done = position.epoch, step = position.step;
  if (o.json) {
    nlohmann::json j = {
        {"model", spec.name},          {"precision", precision::policy_name(spec.policy)},
        {"checkpoint", path},          {"data", data.description},
        {"epochs_done", epochs_done},  {"step_in_epoch", step},
        {"examples", result.examples}, {"loss", result.loss},
        {"seconds", seconds}};
    for (const auto& [name, value] : result.metrics) j[name] = value;
    // The names earlier versions printed.
    j["test_loss"] = result.loss;
    if (!std::isnan(result.metric("accuracy"))) j["test_accuracy"] = result.metric("accuracy");
    fmt::print("{}\n", j.dump());
  } else {
    std::string figures = fmt::format("loss {:.4f}", result.loss);
    for (const auto& [name, value] : result.metrics) {
      figures += name.ends_with("accuracy") ? fmt::format(", {} {:.2f}%", name, 100.0 * value)
                                            : fmt::format(", {} {:.4g}", name, value);
    }
    fmt::print("{} ({}) from {} after {} epoch(s){}: {} on {} examples of {} ({:.2f} s)\n",
               spec.name, precision::policy_name(spec.policy), path, epochs_done,
               step > 0 ? fmt::format(" and {} step(s)", step) : std::string(), figures,
               result.examples, data.description, seconds);
  }
  return 0;
}

}  // namespace

Command add_evaluate_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("evaluate",
                                         "Loss and metrics of a training run's checkpoint on its "
                                         "validation data or other data");
  auto o = std::make_shared<EvaluateOptions>();
  command->add_option("run_dir", o->run_dir, "Run directory (tandem train --output)")->required();
  command->add_option("--data", o->data,
                      "Data to evaluate on: a data specification or image folder (default: the "
                      "run's --validation-data, else Fashion-MNIST's test set for a run on "
                      "Fashion-MNIST; needed for a run on --data without validation data)");
  command->add_option("--data-dir", o->data_dir,
                      "Directory with the Fashion-MNIST IDX files (default: the run's --data-dir, "
                      "else " +
                          data::default_fashion_mnist_dir() + ")");
  command->add_option("--test-examples", o->test_examples,
                      "Use only the first N test examples (default: as many as the run used; 0: "
                      "all)");
  command->add_option("--batch-size,--batch", o->batch_size, "Evaluation batch size")
      ->capture_default_str();
  command->add_option("--threads", o->threads,
                      "Threads, at least 1 (default: one per physical core)");
  command->add_flag("--allow-oversubscription", o->allow_oversubscription,
                    "Allow more threads than physical cores");
  command->add_flag("--json", o->json, "Print one JSON object");
  return {command, [o]() { return run_evaluate(*o); }};
}

}  // namespace tandem::cli
