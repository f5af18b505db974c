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
#include "tandem/precision/policy.h"
#include "tandem/train/evaluation.h"
#include "tandem/train/trainer.h"

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
  const train::ModelSpec spec = train::read_spec(checkpoint.metadata);
  const train::Loss loss_fn = train::make_loss("softmax_cross_entropy");
  if (checkpoint.meta("loss") != loss_fn.name) {
    TANDEM_THROW(InvalidArgument, "'", path, "' was trained with loss ", checkpoint.meta("loss"),
                 "; tandem evaluate measures classifiers trained with ", loss_fn.name,
                 " on Fashion-MNIST");
  }
  const int threads = o.threads > 0 ? o.threads : std::max(1, cpu_info().physical_cores);
  train::Trainer trainer({.eval_batch_size = o.batch_size,
                          .strategy = {.threads_per_device = threads},
                          .input_feature = checkpoint.meta("input_feature"),
                          .loss = loss_fn},
                         train::rebuild_model(spec));
  train::load_model_state(checkpoint, trainer.model());

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
  if (test.size() == 0) TANDEM_THROW(InvalidArgument, "no test examples to evaluate on");
  const auto start = std::chrono::steady_clock::now();
  const train::EvalResult result = trainer.evaluate(
      data::Dataset::from_tensors({{"image", test.images}, {"label", test.labels}}));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double loss = result.loss;
  const double accuracy = result.metric("accuracy");
  const std::string& model_name = spec.name;
  const precision::Policy policy = spec.policy;
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
