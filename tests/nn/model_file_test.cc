// Model files: the built model against hand-built equivalents (same
// parameters, same values, same outputs), shape inference, dtypes under mixed
// precision, and one case per error, each checked for its file:line and layer.

#include "tandem/nn/model_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "support/gradcheck.h"
#include "support/test_files.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/nn/activation.h"
#include "tandem/nn/embedding.h"
#include "tandem/nn/flatten.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/normalization.h"
#include "tandem/nn/residual.h"

namespace tandem {
namespace {

// DESIGN.md's reference cnn (nn::make_cnn) as a model file.
constexpr std::string_view kCnn = R"(name = "cnn_file"
input_shape = [28, 28, 1]

[[layers]]
type = "conv2d"
filters = 32
kernel = 3
padding = "same"
activation = "relu"

[[layers]]
type = "max_pool2d"
size = 2

[[layers]]
type = "conv2d"
filters = 64
kernel = 3
padding = 1
activation = "relu"

[[layers]]
type = "max_pool2d"
size = 2
stride = 2

[[layers]]
type = "flatten"

[[layers]]
type = "dense"
units = 128
activation = "relu"

[[layers]]
type = "dense"
units = 10
)";

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Same parameter names, shapes and values, and the same outputs (bitwise)
// for the same input; one assertion per tensor.
void expect_same_model(nn::Module& a, nn::Module& b, const Tensor& input) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    EXPECT_EQ(pa[i].second.shape(), pb[i].second.shape()) << pa[i].first;
    EXPECT_EQ(pa[i].second.value().to_floats(), pb[i].second.value().to_floats()) << pa[i].first;
  }
  NoGradGuard no_grad;
  const Variable ya = a.forward(Variable(input)), yb = b.forward(Variable(input));
  EXPECT_EQ(ya.shape(), yb.shape());
  EXPECT_EQ(ya.dtype(), yb.dtype());
  EXPECT_EQ(ya.value().to_floats(), yb.value().to_floats());
}

TEST(ModelFile, CnnFileBuildsTheBuiltInCnn) {
  const nn::ModelDefinition definition = nn::parse_model_definition(kCnn, "cnn.toml");
  EXPECT_EQ(definition.name, "cnn_file");
  EXPECT_EQ(definition.input_shape, (std::vector<int64_t>{28, 28, 1}));
  EXPECT_EQ(definition.input_dtype, DType::f32);
  EXPECT_EQ(definition.output_shape(), (std::vector<int64_t>{10}));
  ASSERT_EQ(definition.layers.size(), 7u);
  EXPECT_EQ(definition.layers[0].line, 4);
  EXPECT_EQ(definition.layers[0].padding, 1);
  EXPECT_EQ(definition.layers[1].output_shape, (std::vector<int64_t>{14, 14, 32}));
  EXPECT_EQ(definition.layers[4].output_shape, (std::vector<int64_t>{3136}));

  auto from_file = nn::build_model(definition, {.seed = 7});
  auto builtin = nn::make_cnn({.seed = 7});
  EXPECT_EQ(from_file->parameter_count(), 421642);
  expect_same_model(*from_file, *builtin, testing::random_tensor(Shape{3, 28, 28, 1}, -1, 1, 5));
}

TEST(ModelFile, CnnFileMatchesTheBuiltInUnderMixedPrecision) {
  const nn::ModelDefinition definition = nn::parse_model_definition(kCnn, "cnn.toml");
  for (const bool float32_outputs : {true, false}) {
    const nn::ModelOptions options{.seed = 3,
                                   .compute_dtype = DType::bf16,
                                   .activation_dtype = DType::bf16,
                                   .float32_outputs = float32_outputs};
    auto from_file = nn::build_model(definition, options);
    auto builtin = nn::make_cnn(options);
    expect_same_model(*from_file, *builtin, testing::random_tensor(Shape{2, 28, 28, 1}, -1, 1, 6));
  }
}

TEST(ModelFile, TheExampleFileIsTheReferenceCnn) {
  const std::string path = std::string(TANDEM_SOURCE_DIR) + "/examples/models/cnn.toml";
  const nn::ModelDefinition definition = nn::parse_model_definition(read_text(path), path);
  auto from_file = nn::build_model(definition, {.seed = 11});
  auto builtin = nn::make_cnn({.seed = 11});
  EXPECT_EQ(from_file->parameter_count(), 421642);
  expect_same_model(*from_file, *builtin, testing::random_tensor(Shape{2, 28, 28, 1}, -1, 1, 8));
}

// The example ResNet-20 is the built-in resnet: the same parameters in the
// same order from the same seed (under the file's own paths) and the same
// logits, in training mode (batch statistics) and in evaluation.
TEST(ModelFile, TheExampleResNetFileIsTheBuiltInResNet) {
  const std::string path = std::string(TANDEM_SOURCE_DIR) + "/examples/models/resnet20.toml";
  const nn::ModelDefinition definition = nn::parse_model_definition(read_text(path), path);
  EXPECT_EQ(definition.output_shape(), (std::vector<int64_t>{10}));
  auto from_file = nn::build_model(definition, {.seed = 12});
  auto builtin = nn::make_model("resnet", {.seed = 12});
  EXPECT_EQ(from_file->parameter_count(), 272186);
  const auto pa = from_file->named_parameters(), pb = builtin->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].second.value().to_floats(), pb[i].second.value().to_floats())
        << pa[i].first << " vs " << pb[i].first;
  }
  EXPECT_TRUE(std::any_of(pa.begin(), pa.end(), [](const auto& p) {
    return p.first == "8.shortcut.0.weight";  // stage 3's projection
  }));
  const Tensor images = testing::random_tensor(Shape{3, 28, 28, 1}, -1, 1, 13);
  for (const bool training : {true, false}) {
    from_file->train(training);
    builtin->train(training);
    NoGradGuard no_grad;
    const auto a = from_file->forward(Variable(images)).value().to_floats();
    const auto b = builtin->forward(Variable(images)).value().to_floats();
    ASSERT_EQ(a.size(), 30u);
    EXPECT_EQ(a, b) << (training ? "training" : "evaluation");
  }
}

// The example GPT builds, maps (B, 128) tokens to (B, 128, 256) logits, and
// its attention is causal: a later token never changes an earlier logit.
TEST(ModelFile, TheExampleGptFileIsACausalLanguageModel) {
  const std::string path = std::string(TANDEM_SOURCE_DIR) + "/examples/models/gpt_small.toml";
  const nn::ModelDefinition definition = nn::parse_model_definition(read_text(path), path);
  EXPECT_EQ(definition.output_shape(), (std::vector<int64_t>{128, 256}));
  auto model = nn::build_model(definition, {.seed = 3});
  model->train(false);
  std::vector<int32_t> tokens(2 * 128);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37) % 256);
  NoGradGuard no_grad;
  const auto before =
      model->forward(Variable(Tensor::from_ints(Shape{2, 128}, tokens))).value().to_floats();
  ASSERT_EQ(before.size(), 2u * 128 * 256);
  tokens[100] = (tokens[100] + 1) % 256;  // sequence 0, position 100
  const auto after =
      model->forward(Variable(Tensor::from_ints(Shape{2, 128}, tokens))).value().to_floats();
  const auto logit = [](int64_t b, int64_t t) { return (b * 128 + t) * 256; };
  for (int64_t t = 0; t < 128; ++t) {
    const bool same = std::equal(before.begin() + logit(0, t), before.begin() + logit(0, t + 1),
                                 after.begin() + logit(0, t));
    EXPECT_EQ(same, t < 100) << "position " << t;
  }
  EXPECT_TRUE(std::equal(before.begin() + logit(1, 0), before.end(), after.begin() + logit(1, 0)));
}

TEST(ModelFile, TheDocsListEveryLayerTypeAndKey) {
  const std::string docs = read_text(std::string(TANDEM_SOURCE_DIR) + "/docs/model_files.md");
  for (size_t k = 0; k < nn::layer_kind_names().size(); ++k) {
    const auto kind = static_cast<nn::LayerKind>(k);
    const std::string name(nn::layer_kind_name(kind));
    EXPECT_NE(docs.find("### `" + name + "`"), std::string::npos) << name;
    for (std::string_view key : nn::layer_keys(kind)) {
      EXPECT_NE(docs.find("| `" + std::string(key) + "`"), std::string::npos) << name << "." << key;
    }
  }
}

TEST(ModelFile, EveryTomlExampleInTheDocsLoadsAndBuilds) {
  const std::string docs = read_text(std::string(TANDEM_SOURCE_DIR) + "/docs/model_files.md");
  int examples = 0;
  for (size_t at = docs.find("```toml\n"); at != std::string::npos;
       at = docs.find("```toml\n", at)) {
    at += 8;
    const size_t end = docs.find("```", at);
    ASSERT_NE(end, std::string::npos);
    const std::string text = docs.substr(at, end - at);
    SCOPED_TRACE("docs example " + std::to_string(examples) + ":\n" + text);
    const nn::ModelDefinition definition = nn::parse_model_definition(text, "docs.toml");
    EXPECT_GT(nn::build_model(definition)->parameter_count(), 0);
    ++examples;
  }
  EXPECT_EQ(examples, 4);
}

TEST(ModelFile, DefaultNameIsTheFileStem) {
  const std::string text = "input_shape = [4]\n[[layers]]\ntype = \"dense\"\nunits = 2\n";
  EXPECT_EQ(nn::parse_model_definition(text, "/some/dir/small_mlp.toml").name, "small_mlp");
}

TEST(ModelFile, ResidualBlocksMatchAHandBuiltModel) {
  constexpr std::string_view kText = R"(input_shape = [6]

[[layers]]
type = "dense"
units = 16
activation = "relu"

[[layers]]
type = "residual"
layers = [ { type = "dense", units = 16, activation = "relu" },
           { type = "dense", units = 16 } ]

[[layers]]
type = "residual"
[[layers.layers]]
type = "residual"
layers = [ { type = "dense", units = 16, activation = "gelu", bias = false } ]
[[layers.layers]]
type = "activation"
function = "gelu"

[[layers]]
type = "layer_norm"
eps = 1e-3

[[layers]]
type = "dense"
units = 3
)";
  const nn::ModelDefinition definition = nn::parse_model_definition(kText, "res.toml");
  ASSERT_EQ(definition.layers.size(), 5u);
  EXPECT_EQ(definition.layers[1].layers.size(), 2u);
  EXPECT_EQ(definition.layers[1].layers[1].path, "1.1");
  EXPECT_EQ(definition.layers[1].layers[1].line, 11);
  EXPECT_EQ(definition.layers[2].layers[0].layers[0].path, "2.0.0");
  EXPECT_EQ(definition.output_shape(), (std::vector<int64_t>{3}));

  // The same model by hand, drawing from one generator in file order.
  using kernels::Activation;
  Generator g(9);
  auto expected = std::make_shared<nn::Sequential>();
  expected->emplace<nn::Linear>(6, 16, nn::LinearOptions{.activation = Activation::relu}, g);
  auto a =
      std::make_shared<nn::Linear>(16, 16, nn::LinearOptions{.activation = Activation::relu}, g);
  auto b = std::make_shared<nn::Linear>(16, 16, nn::LinearOptions{}, g);
  expected->emplace<nn::Residual>(std::vector<std::shared_ptr<nn::Module>>{a, b});
  auto c = std::make_shared<nn::Linear>(
      16, 16, nn::LinearOptions{.bias = false, .activation = Activation::gelu}, g);
  auto inner = std::make_shared<nn::Residual>(std::vector<std::shared_ptr<nn::Module>>{c});
  expected->emplace<nn::Residual>(
      std::vector<std::shared_ptr<nn::Module>>{inner, std::make_shared<nn::GELU>()});
  expected->emplace<nn::LayerNorm>(16, 1e-3f);
  expected->emplace<nn::Linear>(16, 3, nn::LinearOptions{}, g);

  auto model = nn::build_model(definition, {.seed = 9});
  EXPECT_EQ(model->named_parameters()[2].first, "1.0.weight");
  EXPECT_EQ(model->named_parameters()[6].first, "2.0.0.weight");
  expect_same_model(*model, *expected, testing::random_tensor(Shape{5, 6}, -1, 1, 2));

  const Variable out = model->forward(Variable(testing::random_tensor(Shape{5, 6}, -1, 1, 3)));
  sum(out).backward();
  for (const auto& [name, p] : model->named_parameters()) EXPECT_TRUE(p.has_grad()) << name;
}

TEST(ModelFile, ConvResidualBlockWithBatchNormAndDropout) {
  constexpr std::string_view kText = R"(input_shape = [9, 7, 3]
[[layers]]
type = "conv2d"
filters = 8
kernel = 3
stride = 2
[[layers]]
type = "residual"
layers = [ { type = "conv2d", filters = 8, kernel = 3, padding = "same", activation = "relu" },
           { type = "batch_norm", momentum = 0.2, synchronized = true } ]
[[layers]]
type = "max_pool2d"
size = 2
stride = 1
[[layers]]
type = "dropout"
rate = 0.25
[[layers]]
type = "flatten"
)";
  const nn::ModelDefinition definition = nn::parse_model_definition(kText, "conv.toml");
  EXPECT_EQ(definition.layers[0].output_shape, (std::vector<int64_t>{4, 3, 8}));
  EXPECT_EQ(definition.layers[2].output_shape, (std::vector<int64_t>{3, 2, 8}));
  EXPECT_EQ(definition.output_shape(), (std::vector<int64_t>{48}));
  auto model = nn::build_model(definition, {.seed = 1});
  model->eval();
  const Variable out =
      model->forward(Variable(testing::random_tensor(Shape{2, 9, 7, 3}, -1, 1, 4)));
  EXPECT_EQ(out.shape(), (Shape{2, 48}));
  EXPECT_EQ(model->named_buffers().size(), 2u);  // the batch norm's running statistics
}

TEST(ModelFile, EmbeddingThenDenseOnTokenIds) {
  constexpr std::string_view kText = R"(name = "tokens"
input_shape = [5]
input_dtype = "i32"
[[layers]]
type = "embedding"
vocabulary = 11
dim = 4
[[layers]]
type = "residual"
layers = [ { type = "layer_norm" }, { type = "activation", function = "relu" } ]
[[layers]]
type = "flatten"
[[layers]]
type = "dense"
units = 3
)";
  const nn::ModelDefinition definition = nn::parse_model_definition(kText, "tokens.toml");
  EXPECT_EQ(definition.input_dtype, DType::i32);
  EXPECT_EQ(definition.layers[0].output_shape, (std::vector<int64_t>{5, 4}));
  EXPECT_EQ(definition.layers[2].output_shape, (std::vector<int64_t>{20}));

  Generator g(4);
  auto expected = std::make_shared<nn::Sequential>();
  expected->emplace<nn::Embedding>(11, 4, g);
  expected->emplace<nn::Residual>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::LayerNorm>(4), std::make_shared<nn::ReLU>()});
  expected->emplace<nn::Flatten>();
  expected->emplace<nn::Linear>(20, 3, nn::LinearOptions{}, g);
  auto model = nn::build_model(definition, {.seed = 4});
  const Tensor ids =
      Tensor::from_ints(Shape{2, 5}, std::vector<int32_t>{1, 2, 3, 4, 5, 10, 0, 0, 7, 3});
  expect_same_model(*model, *expected, ids);
  sum(model->forward(Variable(ids))).backward();
  EXPECT_TRUE(model->named_parameters()[0].second.has_grad());
}

TEST(ModelFile, MixedPrecisionDtypesAroundResidualBlocks) {
  // A residual block first (its shortcut is the f32 input) and one holding
  // the logits layer (its shortcut is bf16, its sum f32).
  constexpr std::string_view kText = R"(input_shape = [8]
[[layers]]
type = "residual"
layers = [ { type = "dense", units = 8, activation = "relu" } ]
[[layers]]
type = "layer_norm"
[[layers]]
type = "residual"
layers = [ { type = "dense", units = 8 }, { type = "dropout", rate = 0.1 } ]
[[layers]]
type = "dropout"
rate = 0.5
)";
  const nn::ModelDefinition definition = nn::parse_model_definition(kText, "mixed.toml");
  const Tensor x = testing::random_tensor(Shape{4, 8}, -1, 1, 1);
  for (const bool float32_outputs : {true, false}) {
    auto model = nn::build_model(definition, {.compute_dtype = DType::bf16,
                                              .activation_dtype = DType::bf16,
                                              .float32_outputs = float32_outputs});
    const Variable y = model->forward(Variable(x));
    EXPECT_EQ(y.dtype(), float32_outputs ? DType::f32 : DType::bf16);
    EXPECT_EQ(y.shape(), (Shape{4, 8}));
    sum(cast(y, DType::f32)).backward();
    for (const auto& [name, p] : model->named_parameters()) EXPECT_TRUE(p.has_grad()) << name;
  }
}

// The logits layer is the last in build order: a shortcut's comes after
// its block's layers. It took the first dense (the shortcut was never
// searched), so the real logits projection produced bf16.
TEST(ModelFile, AShortcutsDenseCanBeTheLogitsLayer) {
  constexpr std::string_view kText = R"(input_shape = [16]
[[layers]]
type = "dense"
units = 10
[[layers]]
type = "residual"
layers = [ { type = "activation", function = "relu" } ]
shortcut = [ { type = "dense", units = 10 } ]
)";
  auto model = nn::build_model(
      nn::parse_model_definition(kText, "shortcut.toml"),
      {.compute_dtype = DType::bf16, .activation_dtype = DType::bf16, .float32_outputs = true});
  const Variable hidden =
      (*model)[0].forward(Variable(testing::random_tensor(Shape{2, 16}, -1, 1, 3)));
  EXPECT_EQ(hidden.dtype(), DType::bf16);
  EXPECT_EQ(model->forward(Variable(testing::random_tensor(Shape{2, 16}, -1, 1, 3))).dtype(),
            DType::f32);
}

TEST(ModelFile, BuildRejectsBadOptions) {
  const nn::ModelDefinition definition = nn::parse_model_definition(kCnn, "cnn.toml");
  EXPECT_THROW(nn::build_model(definition, {.compute_dtype = DType::i32}), InvalidArgument);
  EXPECT_THROW(nn::build_model(definition, {.activation_dtype = DType::i32}), InvalidArgument);
}

struct ErrorCase {
  const char* what;
  std::string text;
  std::string where;   // "model.toml:LINE: layer PATH (TYPE): ", or the top-level prefix
  std::string detail;  // a part of the message after `where`
};

// Layers after a two-line preamble, so that a layer's table starts on line 2.
std::string layers(std::string_view input, std::string_view body) {
  return "input_shape = " + std::string(input) + "\n[[layers]]\n" + std::string(body);
}

std::vector<ErrorCase> error_cases() {
  const std::string dense = "type = \"dense\"\nunits = 4\n";  // lines 3-4
  return {
      {"unknown key (a typo)", layers("[4]", dense + "activaton = \"relu\"\n"),
       "model.toml:5: layer 0 (dense): ",
       "unknown key 'activaton' (dense takes units, activation, bias)"},
      {"unknown key on flatten", layers("[4]", "type = \"flatten\"\nunits = 3\n"),
       "model.toml:4: layer 0 (flatten): ",
       "unknown key 'units' (flatten takes no keys besides type)"},
      {"unknown layer type", layers("[4]", "type = \"dens\"\nunits = 4\n"),
       "model.toml:3: layer 0 (dens): ",
       "unknown layer type 'dens' (expected one of dense, conv2d"},
      {"missing type", layers("[4]", "units = 4\n"),
       "model.toml:2: layer 0: ", "missing key 'type'"},
      {"type not a string", layers("[4]", "type = 3\n"),
       "model.toml:3: layer 0: ", "type must be a string, got an integer"},
      {"missing required key", layers("[4]", "type = \"dense\"\n"),
       "model.toml:2: layer 0 (dense): ", "missing key 'units'"},
      {"missing function", layers("[4]", "type = \"activation\"\n"),
       "model.toml:2: layer 0 (activation): ", "missing key 'function'"},
      {"integer as string", layers("[4]", "type = \"dense\"\nunits = \"4\"\n"),
       "model.toml:4: layer 0 (dense): ", "units must be an integer, got a string"},
      {"float as integer", layers("[4]", "type = \"dense\"\nunits = 4.5\n"),
       "model.toml:4: layer 0 (dense): ", "units must be an integer, got a float"},
      {"boolean as integer", layers("[4]", dense + "bias = 1\n"),
       "model.toml:5: layer 0 (dense): ", "bias must be true or false, got an integer"},
      {"number as string", layers("[4]", "type = \"dropout\"\nrate = \"0.5\"\n"),
       "model.toml:4: layer 0 (dropout): ", "rate must be a number, got a string"},
      {"zero units", layers("[4]", "type = \"dense\"\nunits = 0\n"),
       "model.toml:4: layer 0 (dense): ", "units must be positive, got 0"},
      {"negative filters", layers("[8, 8, 1]", "type = \"conv2d\"\nfilters = -3\nkernel = 3\n"),
       "model.toml:4: layer 0 (conv2d): ", "filters must be positive, got -3"},
      {"zero stride", layers("[8, 8, 1]", "type = \"max_pool2d\"\nsize = 2\nstride = 0\n"),
       "model.toml:5: layer 0 (max_pool2d): ", "stride must be positive, got 0"},
      {"negative padding",
       layers("[8, 8, 1]", "type = \"conv2d\"\nfilters = 2\nkernel = 3\npadding = -1\n"),
       "model.toml:6: layer 0 (conv2d): ", "padding must be non-negative, got -1"},
      {"huge size", layers("[4]", "type = \"dense\"\nunits = 9999999999\n"),
       "model.toml:4: layer 0 (dense): ", "units must be at most 2147483648"},
      // The conv's weight (k, k, C, filters) overflowed int64 in Conv2d.
      {"huge weights",
       layers("[1, 1, 4]",
              "type = \"conv2d\"\nfilters = 1\nkernel = 2147483648\npadding = 2147483648\n"
              "stride = 2147483648\n"),
       "model.toml:2: layer 0 (conv2d): ", "its weights have more than 1099511627776 elements"},
      {"huge dense weights", layers("[2147483648]", "type = \"dense\"\nunits = 1024\n"),
       "model.toml:2: layer 0 (dense): ", "its weights have more than 1099511627776 elements"},
      {"bad activation", layers("[4]", dense + "activation = \"tanh\"\n"),
       "model.toml:5: layer 0 (dense): ",
       "activation must be \"none\", \"relu\", \"gelu\", \"gelu_tanh\" or \"silu\""},
      {"bad function", layers("[4]", "type = \"activation\"\nfunction = \"none\"\n"),
       "model.toml:4: layer 0 (activation): ",
       "function must be \"relu\", \"gelu\", \"gelu_tanh\" or \"silu\""},
      {"global_avg_pool on features", layers("[4]", "type = \"global_avg_pool\"\n"),
       "model.toml:2: layer 0 (global_avg_pool): ",
       "needs a (height, width, channels) input per example, got (4)"},
      {"batch_norm with an activation it cannot fuse",
       layers("[4]", "type = \"batch_norm\"\nactivation = \"gelu\"\n"),
       "model.toml:4: layer 0 (batch_norm): ",
       "activation must be \"none\" or \"relu\" (fused into the batch norm), got \"gelu\""},
      {"residual paths of different shapes",
       layers("[8]",
              "type = \"residual\"\nlayers = [ { type = \"dense\", units = 4 } ]\n"
              "shortcut = [ { type = \"dense\", units = 5 } ]\n"),
       "model.toml:2: layer 0 (residual): ", "its layers map (8) to (4) and its shortcut to (5)"},
      {"error inside a shortcut",
       layers("[8]",
              "type = \"residual\"\nlayers = [ { type = \"dense\", units = 4 } ]\n"
              "shortcut = [ { type = \"dense\", units = 0 } ]\n"),
       "model.toml:5: layer 0.shortcut.0 (dense): ", "units must be positive, got 0"},
      {"attention heads that do not divide the width",
       layers("[4, 6]", "type = \"attention\"\nheads = 4\n"),
       "model.toml:4: layer 0 (attention): ", "width 6 is not divisible by heads 4"},
      {"attention on features", layers("[6]", "type = \"attention\"\nheads = 2\n"),
       "model.toml:2: layer 0 (attention): ",
       "needs a (positions, width) input per example, got (6)"},
      {"attention dropout 1", layers("[4, 6]", "type = \"attention\"\nheads = 2\ndropout = 1\n"),
       "model.toml:5: layer 0 (attention): ", "dropout must be in [0, 1)"},
      {"position_embedding on features", layers("[6]", "type = \"position_embedding\"\n"),
       "model.toml:2: layer 0 (position_embedding): ",
       "needs a (positions, width) input per example, got (6)"},
      {"conv2d on features", layers("[4]", "type = \"conv2d\"\nfilters = 2\nkernel = 1\n"),
       "model.toml:2: layer 0 (conv2d): ",
       "needs a (height, width, channels) input per example, got (4)"},
      {"pool shrinks the height below 1",
       layers("[3, 3, 1]", "type = \"batch_norm\"\n[[layers]]\ntype = \"max_pool2d\"\nsize = 4\n"),
       "model.toml:4: layer 1 (max_pool2d): ",
       "shrinks the height below 1: the 4x4 window does not fit input (3, 3, 1)"},
      {"conv shrinks the width below 1",
       layers("[8, 2, 1]", "type = \"conv2d\"\nfilters = 2\nkernel = 3\n"),
       "model.toml:2: layer 0 (conv2d): ",
       "shrinks the width below 1: the 3x3 kernel does not fit input (8, 2, 1)"},
      {"padded conv shrinks the height below 1",
       layers("[1, 9, 1]", "type = \"conv2d\"\nfilters = 2\nkernel = 5\npadding = 1\n"),
       "model.toml:2: layer 0 (conv2d): ",
       "shrinks the height below 1: the 5x5 kernel with padding 1 does not fit input (1, 9, 1)"},
      {"same padding with an even kernel",
       layers("[8, 8, 1]", "type = \"conv2d\"\nfilters = 2\nkernel = 2\npadding = \"same\"\n"),
       "model.toml:6: layer 0 (conv2d): ", "padding \"same\" needs an odd kernel, got 2"},
      {"unknown padding mode",
       layers("[8, 8, 1]", "type = \"conv2d\"\nfilters = 2\nkernel = 3\npadding = \"full\"\n"),
       "model.toml:6: layer 0 (conv2d): ",
       "padding must be \"same\", \"valid\" or an integer, got \"full\""},
      {"embedding on f32 input", layers("[5]", "type = \"embedding\"\nvocabulary = 10\ndim = 4\n"),
       "model.toml:2: layer 0 (embedding): ", "needs i32 token ids as input"},
      {"dense on token ids", "input_shape = [5]\ninput_dtype = \"i32\"\n[[layers]]\n" + dense,
       "model.toml:3: layer 0 (dense): ", "needs floating-point input"},
      {"residual changes the shape",
       layers("[8]", "type = \"residual\"\nlayers = [ { type = \"dense\", units = 4 } ]\n"),
       "model.toml:2: layer 0 (residual): ", "its layers map (8) to (4)"},
      {"error inside a residual block",
       layers("[8]",
              "type = \"residual\"\nlayers = [ { type = \"dense\", units = 8 },\n"
              "  { type = \"dense\", unit = 8 } ]\n"),
       "model.toml:5: layer 0.1 (dense): ", "unknown key 'unit'"},
      {"empty residual block", layers("[8]", "type = \"residual\"\nlayers = []\n"),
       "model.toml:4: layer 0 (residual): ", "layers is empty"},
      {"residual layers not tables", layers("[8]", "type = \"residual\"\nlayers = [3]\n"),
       "model.toml:4: layer 0.0: ", "must be a table, got an integer"},
      {"dropout rate 1", layers("[4]", "type = \"dropout\"\nrate = 1.0\n"),
       "model.toml:4: layer 0 (dropout): ", "rate must be in [0, 1)"},
      {"missing rate", layers("[4]", "type = \"dropout\"\n"),
       "model.toml:2: layer 0 (dropout): ", "missing key 'rate'"},
      {"momentum above 1", layers("[4]", "type = \"batch_norm\"\nmomentum = 2\n"),
       "model.toml:4: layer 0 (batch_norm): ", "momentum must be in [0, 1]"},
      {"zero eps", layers("[4]", "type = \"layer_norm\"\neps = 0.0\n"),
       "model.toml:4: layer 0 (layer_norm): ", "eps must be positive"},
      {"nan eps", layers("[4]", "type = \"layer_norm\"\neps = nan\n"),
       "model.toml:4: layer 0 (layer_norm): ", "eps must be finite"},
      {"eps past float", layers("[4]", "type = \"layer_norm\"\neps = 1e39\n"),
       "model.toml:4: layer 0 (layer_norm): ", "eps must be at most"},
      {"error in a later layer",
       layers("[4]", dense + "[[layers]]\ntype = \"dense\"\nunits = 2\n[[layers]]\n"
                             "type = \"dense\"\nunit = 2\n"),
       "model.toml:10: layer 2 (dense): ", "unknown key 'unit'"},
      {"invalid TOML", "input_shape = [28,\n[[layers]]\n", "model.toml:2: ", "invalid TOML"},
      // 100,000 parts overflowed toml++'s stack (a crash, not an error).
      {"dotted key too long", "input_shape = [4]\n" + testing::repeated("a.", 100000) + "b = 1\n",
       "model.toml:2: ", "invalid TOML: a dotted key of more than 256 parts"},
      {"unknown top-level key", "inputshape = [4]\n", "model.toml:1: ", "unknown key 'inputshape'"},
      {"missing input_shape", "[[layers]]\n" + dense, "model.toml: ", "missing input_shape"},
      {"input_shape not an array", "input_shape = 4\n[[layers]]\n" + dense,
       "model.toml:1: ", "input_shape must be an array of positive integers, got an integer"},
      {"input_shape with a zero", "input_shape = [4, 0]\n[[layers]]\n" + dense,
       "model.toml:1: ", "input_shape must hold positive integers"},
      {"input_shape empty", "input_shape = []\n[[layers]]\n" + dense,
       "model.toml:1: ", "input_shape must have 1 to 7 dimensions, got 0"},
      {"bad input_dtype", "input_dtype = \"f16\"\ninput_shape = [4]\n[[layers]]\n" + dense,
       "model.toml:1: ", "input_dtype must be \"f32\" or \"i32\", got \"f16\""},
      {"no layers", "input_shape = [4]\n", "model.toml: ", "no layers"},
      {"layers not tables", "input_shape = [4]\nlayers = [1]\n",
       "model.toml:2: layer 0: ", "must be a table, got an integer"},
      {"empty name", "name = \"\"\ninput_shape = [4]\n[[layers]]\n" + dense,
       "model.toml:1: ", "name must not be empty"},
  };
}

TEST(ModelFile, EveryErrorNamesTheFileLineAndLayer) {
  for (const ErrorCase& c : error_cases()) {
    try {
      nn::parse_model_definition(c.text, "model.toml");
      ADD_FAILURE() << c.what << ": no error";
    } catch (const InvalidArgument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(c.where + c.detail), std::string::npos)
          << c.what << ": expected '" << c.where << c.detail << "' in\n  " << message;
    }
  }
}

}  // namespace
}  // namespace tandem
