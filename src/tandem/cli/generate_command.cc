// `tandem generate RUN_DIR --prompt TEXT`: text sampled from a run's trained
// byte-level language model (gpt, or a model file of the same kind).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/utf8.h"
#include "tandem/cli/commands.h"
#include "tandem/cli/run_setup.h"
#include "tandem/train/evaluation.h"
#include "tandem/train/generation.h"
#include "tandem/train/model_factory.h"
#include "tandem/train/run_directory.h"

namespace tandem::cli {
namespace {

struct GenerateOptions {
  std::string run_dir;
  std::string prompt;
  train::GenerationOptions generation;
  std::string seed = "0";  // parsed as uint64, so that -1 is refused
  std::optional<int> threads;
};

int run_generate(const GenerateOptions& o) {
  if (o.threads && *o.threads < 1)
    TANDEM_THROW(InvalidArgument, "--threads must be at least 1, got ", *o.threads);
  if (!std::filesystem::is_directory(o.run_dir))
    TANDEM_THROW(InvalidArgument, "run directory '", o.run_dir, "' does not exist");
  const std::string path = train::RunDirectory(o.run_dir).checkpoint();
  if (!std::filesystem::exists(path)) {
    TANDEM_THROW(InvalidArgument, "'", o.run_dir,
                 "' holds no checkpoint.tckpt: train a gpt there first (tandem train --model gpt "
                 "--output ",
                 o.run_dir, ")");
  }
  const train::Checkpoint checkpoint = train::load_trainer_checkpoint(path);
  const train::ModelFactory saved = train::saved_model(checkpoint);
  const train::ModelSpec& spec = saved.spec;
  set_num_threads(o.threads.value_or(std::max(1, cpu_info().physical_cores)));
  const std::shared_ptr<nn::Module> model = saved.build();
  train::load_model_state(checkpoint, *model);
  const train::ModelInput input = train::model_input(spec, *model);
  const int64_t vocabulary = input.vocabulary;
  const int64_t context = vocabulary > 0 ? input.example.dim(0) : 0;
  if (context == 0) {
    TANDEM_THROW(InvalidArgument,
                 "tandem generate needs a language model (gpt, or a model file "
                 "from (T) token ids to (T, vocabulary) logits); '",
                 o.run_dir, "' trained '", spec.name, "'");
  }
  train::GenerationOptions generation = o.generation;
  generation.seed = parse_seed(o.seed);
  const std::string text = train::generate({*model, context, vocabulary}, o.prompt, generation);
  // A byte-level model can sample bytes that are not UTF-8: escaped, so
  // that the terminal gets valid text.
  fmt::print("{}{}\n", o.prompt, escape_invalid_utf8(text));
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& app) {
  CLI::App* command =
      app.add_subcommand("generate",
                         "Sample text from a trained language model run (gpt or a model file; "
                         "byte-level tokens)");
  auto o = std::make_shared<GenerateOptions>();
  command
      ->add_option("run_dir", o->run_dir,
                   "Run directory of a language model (tandem train --output)")
      ->required();
  command->add_option("--prompt", o->prompt, "The text to continue (at most the context)")
      ->required();
  command->add_option("--tokens,-n", o->generation.tokens, "Bytes to generate")
      ->capture_default_str();
  command
      ->add_option("--temperature", o->generation.temperature,
                   "Sampling temperature; 0: greedy (always the most likely byte)")
      ->capture_default_str();
  command
      ->add_option("--top-k", o->generation.top_k,
                   "Sample among the K most likely bytes only (0: all)")
      ->capture_default_str();
  command->add_option("--seed", o->seed, "Sampling seed (the same seed, the same text)")
      ->capture_default_str();
  command->add_option("--threads", o->threads, "Threads (default: one per physical core)");
  return {command, [o]() { return run_generate(*o); }};
}

}  // namespace tandem::cli
