// `tandem export RUN_DIR --format safetensors|onnx`: a run's trained weights
// in a format other frameworks read (PyTorch's names and layouts), or its
// inference graph for other runtimes (docs/interop.md).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>

#include "tandem/base/error.h"
#include "tandem/cli/commands.h"
#include "tandem/interop/onnx_export.h"
#include "tandem/interop/torch_state.h"
#include "tandem/train/evaluation.h"
#include "tandem/train/model_factory.h"
#include "tandem/train/run_directory.h"

namespace tandem::cli {
namespace {

struct ExportOptions {
  std::string run_dir;
  std::string format = "safetensors";
  std::string dtype = "f32";
  std::string output;  // empty: RUN_DIR/model.safetensors
};

int run_export(const ExportOptions& o) {
  if (o.format != "safetensors" && o.format != "onnx") {
    TANDEM_THROW(InvalidArgument, "--format must be safetensors or onnx, got '", o.format, "'");
  }
  if (o.dtype != "f32" && o.dtype != "bf16" && o.dtype != "f16")
    TANDEM_THROW(InvalidArgument, "--dtype must be f32, bf16 or f16, got '", o.dtype, "'");
  if (o.format == "onnx" && o.dtype != "f32")
    TANDEM_THROW(InvalidArgument, "--dtype applies to safetensors; ONNX export is f32");
  if (!std::filesystem::is_directory(o.run_dir))
    TANDEM_THROW(InvalidArgument, "run directory '", o.run_dir, "' does not exist");
  const std::string checkpoint_path = train::RunDirectory(o.run_dir).checkpoint();
  if (!std::filesystem::exists(checkpoint_path)) {
    TANDEM_THROW(InvalidArgument, "'", o.run_dir,
                 "' holds no checkpoint.tckpt: not a run directory of tandem train");
  }
  const train::Checkpoint checkpoint = train::load_trainer_checkpoint(checkpoint_path);
  const train::ModelFactory saved = train::saved_model(checkpoint);
  const train::ModelSpec& spec = saved.spec;
  const std::shared_ptr<nn::Module> model = saved.build();
  train::load_model_state(checkpoint, *model);
  const std::string output =
      o.output.empty() ? (std::filesystem::path(o.run_dir) / ("model." + o.format)).string()
                       : o.output;
  if (o.format == "onnx") {
    const train::ModelInput input = train::model_input(spec, *model);
    interop::export_onnx(*model, input.example, input.dtype, output, input.any_image_size);
    if (input.any_image_size) {
      fmt::print(
          "wrote {} (ONNX opset {}, input (N, H, W, {}) float32 channels-last, any height and "
          "width, output logits) from {}\n",
          output, interop::kOnnxOpset, input.example[2], checkpoint_path);
    } else if (input.dtype == DType::i32) {
      fmt::print(
          "wrote {} (ONNX opset {}, input (N, T) int64 tokens with T up to {}, output "
          "logits (N, T, vocabulary)) from {}\n",
          output, interop::kOnnxOpset, input.example.dim(0), checkpoint_path);
    } else {
      fmt::print(
          "wrote {} (ONNX opset {}, input (N, {}) float32 channels-last, output logits) "
          "from {}\n",
          output, interop::kOnnxOpset, fmt::join(input.example.to_vector(), ", "), checkpoint_path);
    }
    return 0;
  }
  interop::save_safetensors(*model, output, parse_dtype(o.dtype),
                            {{"producer", "tandem"}, {"model", spec.name}});
  fmt::print("wrote {} ({} tensors, {} parameters, {}) from {}\n", output,
             model->named_state().size(), model->parameter_count(), o.dtype, checkpoint_path);
  return 0;
}

}  // namespace

Command add_export_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "export",
      "Write a run's weights (safetensors, PyTorch names) or graph (ONNX) for other frameworks");
  auto o = std::make_shared<ExportOptions>();
  command->add_option("run_dir", o->run_dir, "Run directory (tandem train --output)")->required();
  command
      ->add_option("--format", o->format,
                   "Output format: safetensors (weights) or onnx (the inference graph)")
      ->capture_default_str();
  command->add_option("--dtype", o->dtype, "Weights as f32, bf16 or f16")->capture_default_str();
  command->add_option("--output,-o", o->output,
                      "File to write (default: RUN_DIR/model.safetensors or model.onnx)");
  return {command, [o]() { return run_export(*o); }};
}

}  // namespace tandem::cli
