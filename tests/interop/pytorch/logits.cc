// tandem's side of the PyTorch cross-check (check.py): a built-in model's
// seeded initial weights as a safetensors export, or its logits in
// evaluation mode for an input, with weights from a safetensors file.
//   interop_logits MODEL SETTINGS export SEED OUT.safetensors
//   interop_logits MODEL SETTINGS logits WEIGHTS.safetensors INPUT.safetensors OUT.safetensors
// INPUT holds "input": f32 images (N, H, W, C) or i32 tokens (N, T); OUT
// gets "logits" (f32).
#include <cstdio>
#include <exception>
#include <string>

#include "tandem/autograd/variable.h"
#include "tandem/interop/torch_state.h"
#include "tandem/nn/models.h"

int main(int argc, char** argv) {
  using namespace tandem;
  try {
    if (argc < 4) throw std::runtime_error("usage: see logits.cc");
    const std::string name = argv[1], settings = argv[2], command = argv[3];
    if (command == "export" && argc == 6) {
      auto model = nn::make_model(name, {.seed = std::stoull(argv[4]), .settings = settings});
      interop::save_safetensors(*model, argv[5]);
      return 0;
    }
    if (command == "logits" && argc == 7) {
      auto model = nn::make_model(name, {.seed = 0, .settings = settings});
      interop::load_safetensors(interop::SafetensorsFile(argv[4]), *model);
      const interop::SafetensorsFile input(argv[5]);
      const Tensor x = input.read(*input.find("input"));
      model->eval();
      NoGradGuard no_grad;
      const Tensor logits = model->forward(Variable(x)).value().to(DType::f32);
      interop::write_safetensors(argv[6], {{"logits", logits}});
      return 0;
    }
    throw std::runtime_error("usage: see logits.cc");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "interop_logits: %s\n", e.what());
    return 1;
  }
}
