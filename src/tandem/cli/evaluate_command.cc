// `tandem evaluate RUN_DIR`: the loss and accuracy of a run's checkpoint on
// the Fashion-MNIST test set, with the model and precision it was trained in.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
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
  int64_t test_examples = 0;  // 0: all
  int64_t batch_size = 1000;
  int threads = 0;  // 0: one per physical core
  bool json = false;
};

int run_evaluate(const EvaluateOptions& o) {
  if (!std::filesystem::is_directory(o.run_dir))
    TANDEM_THROW(InvalidArgument, "run directory '", o.run_dir, "' does not exist");
  if (o.threads < 0)
    TANDEM_THROW(InvalidArgument, "thread count must be at least 1, got ", o.threads);
  if (o.test_examples < 0)
    TANDEM_THROW(InvalidArgument, "--test-examples must be 0 (all) or more, got ", o.test_examples);
  const std::string path = (std::filesystem::path(o.run_dir) / "checkpoint.tckpt").string();
  const train::Checkpoint checkpoint = train::load_trainer_checkpoint(path);
  const std::string model_name = checkpoint.meta("model");
  // Checkpoints from before precision was recorded were float32 runs.
  const auto meta_or = [&](const char* key, const std::string& fallback) {
    return checkpoint.metadata.count(key) ? checkpoint.meta(key) : fallback;
  };
  const precision::Policy policy = precision::parse_policy(meta_or("precision", "float32"));
  nn::ModelOptions model_options = precision::model_options(policy);
  model_options.compute_dtype = parse_dtype(
      meta_or("compute_dtype", std::string(dtype_name(precision::matrix_dtype(policy)))));
  const std::shared_ptr<nn::Module> model = nn::make_model(model_name, model_options);
  train::load_model_state(checkpoint, *model);

  const data::FashionMnist fashion = data::load_fashion_mnist(o.data_dir);
  data::LabeledImages test = fashion.test;
  if (o.test_examples > 0 && o.test_examples < test.size())
    test = {test.images.slice(0, o.test_examples), test.labels.slice(0, o.test_examples)};
  NumThreadsScope threads(o.threads > 0 ? o.threads : std::max(1, cpu_info().physical_cores));
  const auto start = std::chrono::steady_clock::now();
  const train::EvalSums sums = train::evaluate_rows(*model, test, 0, test.size(), o.batch_size);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double n = static_cast<double>(std::max<int64_t>(test.size(), 1));
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
  command->add_option("--test-examples", o->test_examples, "Use only the first N test examples");
  command->add_option("--batch-size,--batch", o->batch_size, "Evaluation batch size")
      ->capture_default_str();
  command->add_option("--threads", o->threads, "Threads (default: one per physical core)");
  command->add_flag("--json", o->json, "Print one JSON object");
  return {command, [o]() { return run_evaluate(*o); }};
}

}  // namespace tandem::cli
