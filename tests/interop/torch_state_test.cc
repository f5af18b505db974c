// A model's weights under PyTorch's names and layouts: exported, loaded back
// bit for bit, and refused (every offending tensor listed, the model left as
// it was) when the file does not match.
#include "tandem/interop/torch_state.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/nn/conv.h"
#include "tandem/nn/models.h"
#include "tandem/train/model_factory.h"
#include "tandem/train/trainer.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  const fs::path dir = fs::path(TANDEM_TEST_TMPDIR) / "torch_state";
  fs::create_directories(dir);
  return (dir / name).string();
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// Every parameter and buffer of `a` equals `b`'s, bit for bit.
void expect_same_state(nn::Module& a, nn::Module& b) {
  auto sa = a.named_state();
  auto sb = b.named_state();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].name, sb[i].name);
    EXPECT_TRUE(same_bytes(sa[i].value, sb[i].value)) << sa[i].name;
  }
}

TEST(TorchState, ConvWeightsAreExportedInPyTorchsLayout) {
  Generator g(5);
  nn::Conv2d conv(2, 3, 3, {.padding = 1}, g);
  const auto state = interop::torch_state(conv);
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].first, "weight");
  EXPECT_EQ(state[1].first, "bias");
  const Tensor& exported = state[0].second;
  ASSERT_EQ(exported.shape(), (Shape{3, 2, 3, 3}));                   // (O, C, KH, KW)
  const std::vector<float> hwio = conv.weight().value().to_floats();  // (KH, KW, C, O)
  const std::vector<float> oihw = exported.to_floats();
  for (int o = 0; o < 3; ++o)
    for (int c = 0; c < 2; ++c)
      for (int kh = 0; kh < 3; ++kh)
        for (int kw = 0; kw < 3; ++kw)
          ASSERT_EQ(oihw[((o * 2 + c) * 3 + kh) * 3 + kw], hwio[((kh * 3 + kw) * 2 + c) * 3 + o]);
}

TEST(TorchState, ExportThenLoadGivesTheSameModelBitForBit) {
  for (const char* name : {"mlp", "cnn", "resnet", "gpt"}) {
    SCOPED_TRACE(name);
    const std::string settings = std::string(name) == "resnet" ? "depth=8,width=4"
                                 : std::string(name) == "gpt"
                                     ? "layers=1,width=16,heads=2,context=8"
                                     : "";
    auto trained = nn::make_model(name, {.seed = 1, .settings = settings});
    // Running statistics that are not the initial ones.
    for (auto& [buffer, t] : trained->named_buffers()) t->fill(0.25f);
    const std::string path = scratch(std::string(name) + ".safetensors");
    interop::save_safetensors(*trained, path);
    auto fresh = nn::make_model(name, {.seed = 2, .settings = settings});
    const interop::LoadReport report =
        interop::load_safetensors(interop::SafetensorsFile(path), *fresh);
    EXPECT_TRUE(report.missing.empty());
    EXPECT_TRUE(report.unexpected.empty());
    EXPECT_EQ(report.loaded.size(), trained->named_state().size());
    expect_same_state(*trained, *fresh);
  }
}

TEST(TorchState, ABfloat16ExportLoadsAsTheRoundedWeights) {
  auto model = nn::make_model("mlp", {.seed = 1});
  const std::string path = scratch("mlp_bf16.safetensors");
  interop::save_safetensors(*model, path, DType::bf16);
  const interop::SafetensorsFile file(path);
  EXPECT_EQ(file.find("1.weight")->dtype, "BF16");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  auto fresh = nn::make_model("mlp", {.seed = 2});
  interop::load_safetensors(file, *fresh);
  const auto a = model->named_parameters();
  const auto b = fresh->named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(same_bytes(a[i].second.value().to(DType::bf16).to(DType::f32), b[i].second.value()))
        << a[i].first;
  }
  EXPECT_THROW(interop::torch_state(*model, DType::i32), InvalidArgument);
}

// f16 holds magnitudes up to 65504: a larger weight became inf silently.
TEST(TorchState, AnF16ExportRefusesWeightsF16CannotHold) {
  auto model = nn::make_model("mlp", {.seed = 1});
  EXPECT_NO_THROW(interop::torch_state(*model, DType::f16));
  Tensor bias = model->named_parameters()[1].second.value();
  bias.data<float>()[0] = 1e5f;
  try {
    interop::torch_state(*model, DType::f16);
    ADD_FAILURE() << "exported 1e5 as f16";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("(1): 1.bias"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(interop::torch_state(*model, DType::bf16));
}

std::string load_error(const std::string& path, nn::Module& model, bool strict) {
  try {
    interop::load_safetensors(interop::SafetensorsFile(path), model, {.strict = strict});
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

TEST(TorchState, StrictLoadingListsEveryMissingUnexpectedAndMismatchedTensor) {
  auto source = nn::make_model("mlp", {.seed = 1});
  auto state = interop::torch_state(*source);
  // Drop "1.bias", add "extra", give "2.weight" a wrong shape, and add the
  // counter PyTorch's BatchNorm keeps (ignored only beside a running_mean).
  std::vector<std::pair<std::string, Tensor>> edited;
  for (auto& [name, t] : state) {
    if (name == "1.bias") continue;
    edited.emplace_back(name, name == "2.weight" ? Tensor::zeros(Shape{512, 3}) : t);
  }
  edited.emplace_back("extra", Tensor::zeros(Shape{1}));
  const std::string path = scratch("edited.safetensors");
  interop::write_safetensors(path, edited);

  auto target = nn::make_model("mlp", {.seed = 2});
  auto untouched = nn::make_model("mlp", {.seed = 2});
  const std::string strict = load_error(path, *target, true);
  EXPECT_NE(strict.find("missing: the model's, not in the file (1): 1.bias"), std::string::npos)
      << strict;
  EXPECT_NE(strict.find("unexpected: in the file, not the model (1): extra"), std::string::npos);
  EXPECT_NE(strict.find("2.weight (file F32 (512, 3), model F32 (512, 512)"), std::string::npos)
      << strict;
  expect_same_state(*target, *untouched);  // nothing loaded
  // A wrong shape is an error without strictness too (as in PyTorch).
  EXPECT_NE(load_error(path, *target, false).find("2.weight"), std::string::npos);
  expect_same_state(*target, *untouched);

  // A file with no tensor in common loads nothing: refused, not silent.
  const std::string other = scratch("other.safetensors");
  interop::write_safetensors(other, {{"encoder.weight", Tensor::zeros(Shape{2})}});
  EXPECT_NE(load_error(other, *target, false).find("shares no tensor with the model"),
            std::string::npos);

  // Without the misshapen tensor, non-strict loading takes the rest.
  edited.erase(std::find_if(edited.begin(), edited.end(),
                            [](const auto& e) { return e.first == "2.weight"; }));
  interop::write_safetensors(path, edited);
  EXPECT_NE(load_error(path, *target, true).find("1.bias"), std::string::npos);
  const interop::LoadReport r =
      interop::load_safetensors(interop::SafetensorsFile(path), *target, {.strict = false});
  EXPECT_EQ(r.missing, (std::vector<std::string>{"1.bias", "2.weight"}));
  EXPECT_EQ(r.unexpected, (std::vector<std::string>{"extra"}));
  const auto loaded = target->named_parameters();
  EXPECT_TRUE(same_bytes(loaded[0].second.value(), source->named_parameters()[0].second.value()));
  EXPECT_TRUE(
      same_bytes(loaded[1].second.value(), untouched->named_parameters()[1].second.value()));
}

TEST(TorchState, PyTorchsBatchNormCountersAreIgnoredAndIntegerWeightsRefused) {
  auto model = nn::make_model("resnet", {.seed = 1, .settings = "depth=8,width=4"});
  auto state = interop::torch_state(*model);
  state.emplace_back("stem.1.num_batches_tracked", Tensor::zeros(Shape{}, DType::i32));
  const std::string path = scratch("counters.safetensors");
  interop::write_safetensors(path, state);
  const interop::LoadReport r = interop::load_safetensors(interop::SafetensorsFile(path), *model);
  EXPECT_EQ(r.ignored, (std::vector<std::string>{"stem.1.num_batches_tracked"}));

  auto mlp = nn::make_model("mlp", {.seed = 1});
  auto ints = interop::torch_state(*mlp);
  ints[0].second = Tensor::zeros(ints[0].second.shape(), DType::i32);
  interop::write_safetensors(path, ints);
  const std::string error = load_error(path, *mlp, true);
  EXPECT_NE(error.find("1.weight (file I32 (512, 784), model F32 (512, 784)"), std::string::npos)
      << error;
}

TEST(TorchState, ATrainerLoadsTheWeightsIntoEveryReplica) {
  auto source = nn::make_model("mlp", {.seed = 1});
  const std::string path = scratch("replicas.safetensors");
  interop::save_safetensors(*source, path);
  train::TrainConfig c{.epochs = 1, .batch_size = 32, .engine = {.seed = 3}};
  c.strategy = {.kind = distribute::StrategyKind::mirrored,
                .devices = 2,
                .threads_per_device = 1,
                .allow_oversubscription = true};
  train::Trainer trainer(c, train::builtin_model("mlp", precision::Policy::float32, 7));
  interop::load_safetensors(interop::SafetensorsFile(path), trainer);
  expect_same_state(*source, trainer.replica_model(0));
  expect_same_state(*source, trainer.replica_model(1));
}

}  // namespace
}  // namespace tandem
