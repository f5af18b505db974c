// Model files through the train layer: model_from_file, its spec, the spec's
// round trip through checkpoint metadata, and rebuild_model from the
// recorded text.

#include "tandem/train/model_factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/gradcheck.h"
#include "tandem/base/error.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kSmall = R"(# no name: the file's stem names the model
input_shape = [6, 6, 2]

[[layers]]
type = "conv2d"
filters = 4
kernel = 3
padding = "same"
activation = "relu"

[[layers]]
type = "residual"
layers = [ { type = "conv2d", filters = 4, kernel = 3, padding = "same" },
           { type = "batch_norm" } ]

[[layers]]
type = "flatten"

[[layers]]
type = "dense"
units = 5
)";

std::string write_file(const std::string& name, std::string_view text) {
  const std::string path = std::string(TANDEM_TEST_TMPDIR) + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// Same parameters (names and values) and the same outputs for the same input.
void expect_same_model(nn::Module& a, nn::Module& b, const Tensor& input) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    EXPECT_EQ(pa[i].second.value().to_floats(), pb[i].second.value().to_floats()) << pa[i].first;
  }
  a.eval();
  b.eval();
  NoGradGuard no_grad;
  EXPECT_EQ(a.forward(Variable(input)).value().to_floats(),
            b.forward(Variable(input)).value().to_floats());
}

TEST(ModelFromFile, SpecRoundTripsThroughMetadataAndRebuildsTheSameModel) {
  const std::string path = write_file("small_model.toml", kSmall);
  for (const precision::Policy policy :
       {precision::Policy::float32, precision::Policy::mixed_bfloat16}) {
    const train::ModelFactory factory = train::model_from_file(path, policy, /*seed=*/5);
    EXPECT_EQ(factory.spec.name, "small_model");
    EXPECT_EQ(factory.spec.definition, kSmall);
    EXPECT_EQ(factory.spec.policy, policy);
    EXPECT_EQ(factory.spec.compute_dtype, precision::matrix_dtype(policy));
    EXPECT_EQ(factory.spec.seed, 5u);
    EXPECT_TRUE(factory.spec.rebuildable);

    distribute::EngineState checkpoint;
    train::write_spec(factory.spec, checkpoint.metadata);
    const train::ModelSpec read = train::read_spec(checkpoint);
    EXPECT_EQ(read, factory.spec);

    // From the recorded text, not the file: it may be gone since.
    fs::remove(path);
    const train::ModelFactory rebuilt = train::rebuild_model(read);
    EXPECT_EQ(rebuilt.spec, factory.spec);
    auto a = factory.build(), b = rebuilt.build();
    expect_same_model(*a, *b, testing::random_tensor(Shape{3, 6, 6, 2}, -1, 1, 2));
    write_file("small_model.toml", kSmall);
  }
}

// The CRC covers a checkpoint's bytes, not their sense: an edited or
// damaged entry is refused by name. std::stoull read "-1" as 2^64 - 1 and
// "5x" as 5.
TEST(ModelSpecMetadata, MalformedEntriesAreRefusedByName) {
  distribute::EngineState good;
  train::write_spec(train::builtin_model("mlp", precision::Policy::float32, 7).spec, good.metadata);
  EXPECT_EQ(train::read_spec(good).seed, 7u);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"model_seed", "-1"},
      {"model_seed", "5x"},
      {"model_seed", ""},
      {"model_seed", "1e3"},
      {"model_seed", "18446744073709551616"},
      {"model_rebuildable", "yes"},
      {"precision", "float64"},
      {"compute_dtype", "f128"}};
  for (const auto& [key, value] : bad) {
    distribute::EngineState c = good;
    c.metadata[key] = value;
    try {
      train::read_spec(c);
      ADD_FAILURE() << key << " = '" << value << "' was accepted";
    } catch (const IoError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(key == "precision" || key == "compute_dtype"
                                                     ? "model settings are malformed"
                                                     : "'" + key + "'"))
          << key << " = " << value;
    }
  }
  distribute::EngineState missing = good;
  missing.metadata.erase("model_seed");
  EXPECT_THROW(train::read_spec(missing), IoError);
}

TEST(ModelFromFile, TheExampleCnnHasTheReferenceParameterCount) {
  const train::ModelFactory factory = train::model_from_file(
      std::string(TANDEM_SOURCE_DIR) + "/examples/models/cnn.toml", precision::Policy::float32, 1);
  EXPECT_EQ(factory.spec.name, "reference_cnn");
  EXPECT_EQ(factory.build()->parameter_count(), 421642);
  auto builtin = train::builtin_model("cnn", precision::Policy::float32, 1).build();
  expect_same_model(*factory.build(), *builtin,
                    testing::random_tensor(Shape{2, 28, 28, 1}, -1, 1, 3));
}

// What each model takes, from the spec and the built model alone: the
// input the export, generate and scaling commands build their examples from.
TEST(ModelInput, BuiltInsAndModelFilesSayWhatTheyTake) {
  const auto input_of = [](const train::ModelFactory& f) {
    return train::model_input(f.spec, *f.build());
  };
  const train::ModelInput cnn = input_of(train::builtin_model("cnn", precision::Policy::float32));
  EXPECT_EQ(cnn.example, (Shape{28, 28, 1}));
  EXPECT_EQ(cnn.dtype, DType::f32);
  EXPECT_EQ(cnn.vocabulary, 0);
  const train::ModelInput resnet = input_of(train::builtin_model(
      "resnet", precision::Policy::float32, 0, std::nullopt, "depth=8,width=4,channels=3"));
  EXPECT_EQ(resnet.example, (Shape{28, 28, 3}));
  const train::ModelInput gpt = input_of(train::builtin_model(
      "gpt", precision::Policy::float32, 0, std::nullopt, "layers=1,width=16,heads=2,context=12"));
  EXPECT_EQ(gpt.example, (Shape{12}));
  EXPECT_EQ(gpt.dtype, DType::i32);
  EXPECT_EQ(gpt.vocabulary, 256);
  const std::string models = std::string(TANDEM_SOURCE_DIR) + "/examples/models/";
  const train::ModelInput small =
      input_of(train::model_from_file(models + "gpt_small.toml", precision::Policy::float32));
  EXPECT_EQ(small.example, (Shape{128}));
  EXPECT_EQ(small.dtype, DType::i32);
  EXPECT_EQ(small.vocabulary, 256);
  const train::ModelInput file_cnn =
      input_of(train::model_from_file(models + "cnn.toml", precision::Policy::float32));
  EXPECT_EQ(file_cnn.example, (Shape{28, 28, 1}));
  EXPECT_EQ(file_cnn.vocabulary, 0);  // not a language model
}

TEST(ModelFromFile, ComputeDtypeOverridesThePolicys) {
  const std::string path = write_file("compute.toml", kSmall);
  const train::ModelFactory factory =
      train::model_from_file(path, precision::Policy::mixed_bfloat16, 0, DType::f32);
  EXPECT_EQ(factory.spec.compute_dtype, DType::f32);
  EXPECT_EQ(train::rebuild_model(factory.spec).spec.compute_dtype, DType::f32);
  EXPECT_THROW(train::model_from_file(path, precision::Policy::float32, 0, DType::i32),
               InvalidArgument);
}

TEST(ModelFromFile, MissingDirectoryAndOversizedFilesAreIoErrors) {
  const std::string missing = std::string(TANDEM_TEST_TMPDIR) + "/no_such_model.toml";
  const std::string directory = std::string(TANDEM_TEST_TMPDIR) + "/a_model_directory.toml";
  fs::create_directories(directory);
  const std::string big = write_file("big_model.toml", "input_shape = [4]\n");
  fs::resize_file(big, train::kMaxModelFileBytes + 1);
  for (const std::string& path : {missing, directory, big}) {
    try {
      train::model_from_file(path);
      ADD_FAILURE() << path << ": no error";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
}

TEST(ModelFromFile, BadDefinitionsNameThePathAndLine) {
  const std::string path = write_file("typo.toml",
                                      "input_shape = [4]\n[[layers]]\n"
                                      "type = \"dense\"\nunits = 3\nbais = false\n");
  try {
    train::model_from_file(path);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":5: layer 0 (dense): unknown key 'bais'"),
              std::string::npos)
        << e.what();
  }
}

TEST(ModelFromFile, RebuildRejectsABrokenRecordedDefinition) {
  train::ModelSpec spec{.name = "broken",
                        .definition = "input_shape = [4]\n[[layers]]\ntype = \"dens\"\n",
                        .rebuildable = true};
  try {
    train::rebuild_model(spec);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("recorded definition of 'broken':3: layer 0 (dens)"),
              std::string::npos)
        << e.what();
  }
  spec.rebuildable = false;
  EXPECT_THROW(train::rebuild_model(spec), InvalidArgument);
}

}  // namespace
}  // namespace tandem
