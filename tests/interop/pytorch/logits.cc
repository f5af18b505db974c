// tandem's side of the interop cross-checks (check.py with PyTorch,
// onnx_check.py with ONNX and OpenCV): a model's seeded weights as a
// safetensors export (batch-norm running statistics randomised, so that
// evaluation mode is tested), its ONNX graph with weights from a file, or
// its logits in evaluation mode for an input.
//   interop_logits MODEL SETTINGS export SEED OUT.safetensors
//   interop_logits MODEL SETTINGS onnx WEIGHTS.safetensors OUT.onnx
//   interop_logits MODEL SETTINGS logits WEIGHTS.safetensors INPUT.safetensors OUT.safetensors
// MODEL is a built-in's name or a model file (.toml). INPUT holds "input":
// f32 images (N, H, W, C) or i32 tokens (N, T); OUT gets "logits" (f32).
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "tandem/autograd/variable.h"
#include "tandem/base/random.h"
#include "tandem/interop/onnx_export.h"
#include "tandem/interop/torch_state.h"
#include "tandem/nn/init.h"
#include "tandem/nn/model_file.h"
#include "tandem/nn/models.h"
#include "tandem/nn/resnet.h"
#include "tandem/nn/transformer.h"

namespace {

using namespace tandem;

struct Built {
  std::shared_ptr<nn::Module> model;
  Shape example;
  DType input_dtype = DType::f32;
  bool any_image_size = false;  // as train::model_input says
};

Built build(const std::string& name, const std::string& settings, uint64_t seed) {
  if (name.ends_with(".toml")) {
    std::ifstream in(name);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const nn::ModelDefinition d = nn::parse_model_definition(text, name);
    return {nn::build_model(d, {.seed = seed}), Shape(d.input_shape), d.input_dtype};
  }
  auto model = nn::make_model(name, {.seed = seed, .settings = settings});
  if (const auto* gpt = dynamic_cast<const nn::Gpt*>(model.get()))
    return {model, Shape{gpt->config().context}, DType::i32};
  if (const auto* resnet = dynamic_cast<const nn::ResNet*>(model.get()))
    return {model, Shape{28, 28, resnet->config().channels}, DType::f32, true};
  return {model, Shape{28, 28, 1}};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 4) throw std::runtime_error("usage: see logits.cc");
    const std::string name = argv[1], settings = argv[2], command = argv[3];
    if (command == "export" && argc == 6) {
      Built b = build(name, settings, std::stoull(argv[4]));
      Generator g(std::stoull(argv[4]) + 1);
      for (auto& [buffer, t] : b.model->named_buffers()) {
        if (buffer.ends_with("running_mean")) nn::init::uniform(*t, -0.5f, 0.5f, g);
        if (buffer.ends_with("running_var")) nn::init::uniform(*t, 0.5f, 2.0f, g);
      }
      interop::save_safetensors(*b.model, argv[5]);
      return 0;
    }
    if (command == "onnx" && argc == 6) {
      Built b = build(name, settings, 0);
      interop::load_safetensors(interop::SafetensorsFile(argv[4]), *b.model);
      interop::export_onnx(*b.model, b.example, b.input_dtype, argv[5], b.any_image_size);
      return 0;
    }
    if (command == "logits" && argc == 7) {
      Built b = build(name, settings, 0);
      interop::load_safetensors(interop::SafetensorsFile(argv[4]), *b.model);
      const interop::SafetensorsFile input(argv[5]);
      const Tensor x = input.read(*input.find("input"));
      b.model->eval();
      NoGradGuard no_grad;
      const Tensor logits = b.model->forward(Variable(x)).value().to(DType::f32);
      interop::write_safetensors(argv[6], {{"logits", logits}});
      return 0;
    }
    throw std::runtime_error("usage: see logits.cc");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "interop_logits: %s\n", e.what());
    return 1;
  }
}
