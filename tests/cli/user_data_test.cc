// `tandem train` on models and data users bring: a model file trained on
// Fashion-MNIST written as JPEG TFRecord shards reaches the built-in path's
// accuracy; an image folder and a CSV regression train; a TFRecord file
// larger than the process's resident set streams; bad model files, data
// specifications and data each give one clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "support/cli.h"
#include "support/test_data.h"
#include "support/test_files.h"
#include "tandem/data/example.h"
#include "tandem/data/image.h"
#include "tandem/data/tfrecord.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::expect_one_line_error;
using testing::fashion;
using testing::run;
using testing::tmp;

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::trunc) << text;
}

nlohmann::json summary_of(const std::string& run_dir) {
  std::ifstream in(run_dir + "/summary.json");
  return nlohmann::json::parse(in);
}

const char* kFashionJpegSpec = R"(
format = "tfrecord"
files = ["train-*.tfrecord"]
shuffle = 6400          # the whole split: the same order as the built-in path's
[features.image]
type = "bytes"
decode = "image"
channels = 1
mean = [0.2860]
std = [0.3530]
[features.label]
type = "int64"
)";

TEST(UserData, ModelFileOnJpegTfrecordShardsMatchesTheBuiltInPath) {
  const std::string dir = tmp("user-jpeg");
  const data::LabeledImages train{fashion().train.images.slice(0, 6400),
                                  fashion().train.labels.slice(0, 6400)};
  const data::LabeledImages test{fashion().test.images.slice(0, 1000),
                                 fashion().test.labels.slice(0, 1000)};
  testing::write_jpeg_tfrecords(dir + "/train", train, {2000, 2000, 2400});
  testing::write_jpeg_tfrecords(dir + "/test", test, {1000});
  write(dir + "/train/data.toml", kFashionJpegSpec);
  write(dir + "/test/data.toml",
        std::string(kFashionJpegSpec)
            .replace(std::string(kFashionJpegSpec).find("shuffle"), 7, "#huffle"));
  const std::string common = " --epochs 1 --schedule constant --threads 2 --quiet --seed 3";
  const testing::CommandResult files =
      run("train --model " + std::string(TANDEM_SOURCE_DIR) + "/examples/models/cnn.toml --data " +
          dir + "/train/data.toml --validation-data " + dir + "/test/data.toml --output " + dir +
          "/run-files" + common);
  ASSERT_EQ(files.status, 0) << files.output;
  const testing::CommandResult builtin =
      run("train --model cnn --train-examples 6400 --test-examples 1000 --output " + dir +
          "/run-builtin" + common);
  ASSERT_EQ(builtin.status, 0) << builtin.output;
  const nlohmann::json a = summary_of(dir + "/run-files"), b = summary_of(dir + "/run-builtin");
  EXPECT_EQ(a.at("config").at("model"), "reference_cnn");
  EXPECT_EQ(a.at("history")[0].at("train_examples"), 6400);
  // The same architecture, initialisation and order; the pixels went through
  // JPEG (quality 95), so the figures are close, not equal.
  const double files_accuracy = a.at("validation_accuracy").get<double>();
  const double builtin_accuracy = b.at("validation_accuracy").get<double>();
  EXPECT_GT(files_accuracy, 0.7);
  EXPECT_NEAR(files_accuracy, builtin_accuracy, 0.02);
  EXPECT_NEAR(a.at("train_loss").get<double>(), b.at("train_loss").get<double>(), 0.05);
  // The run's checkpoint rebuilds from its recorded model file.
  EXPECT_EQ(run("train --model " + std::string(TANDEM_SOURCE_DIR) +
                "/examples/models/cnn.toml --data " + dir + "/train/data.toml --output " + dir +
                "/run-files --resume --epochs 2 --schedule constant --threads 2 --quiet --seed 3")
                .status,
            0);
}

// A folder of PNGs, one sub-folder per class: folder/class<c>/<n>.png for
// each class c in `classes`, `per_class` Fashion-MNIST training images of
// that class each.
void write_image_folder(const std::string& folder, const std::vector<int32_t>& classes,
                        int per_class) {
  const std::vector<int32_t> labels = fashion().train.labels.to_ints();
  const std::vector<float> pixels = fashion().train.images.to_floats();
  std::map<int32_t, int> written;
  for (int32_t c : classes) written[c] = 0;
  int total = 0;
  for (size_t i = 0; i < labels.size() && total < per_class * static_cast<int>(classes.size());
       ++i) {
    const int32_t c = labels[i];
    if (!written.count(c) || written[c] >= per_class) continue;
    Tensor u8 = Tensor::empty(Shape{28, 28, 1}, DType::u8);
    for (int k = 0; k < 784; ++k) {
      const float v = (pixels[i * 784 + k] * data::kFashionMnistStd + data::kFashionMnistMean);
      u8.data<uint8_t>()[k] = static_cast<uint8_t>(std::clamp(v * 255.0f + 0.5f, 0.0f, 255.0f));
    }
    const std::string path =
        folder + "/class" + std::to_string(c) + "/" + std::to_string(written[c]++) + ".png";
    ++total;
    fs::create_directories(fs::path(path).parent_path());
    const std::string bytes = data::tensor_bytes(data::encode_png(u8));
    std::ofstream(path, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
}

const char* kMlp3 =
    "input_shape = [28, 28, 1]\n[[layers]]\ntype = \"flatten\"\n[[layers]]\ntype = "
    "\"dense\"\nunits = 64\nactivation = \"relu\"\n[[layers]]\ntype = \"dense\"\nunits = 3\n";

// A validation or evaluation folder that lacks one of the training
// folder's classes keeps the model's labels (by name; they used to shift,
// giving an accuracy near 0), with a warning naming the missing class; one
// with a class the model never saw, and a resume on other classes, are
// refused. The classes are in the checkpoint and summary.json.
TEST(UserData, FoldersAreMatchedToTheModelsClassesByName) {
  const std::string dir = tmp("user-folder-classes");
  write_image_folder(dir + "/train", {0, 1, 2}, 100);
  write_image_folder(dir + "/val", {1, 2}, 60);  // no class0
  write_image_folder(dir + "/odd", {1, 5}, 10);  // class5: unknown to the model
  write(dir + "/mlp3.toml", kMlp3);
  const testing::CommandResult trained =
      run("train --model " + dir + "/mlp3.toml --data " + dir + "/train --validation-data " + dir +
          "/val --batch-size 30 --epochs 3 --schedule constant --quiet --output " + dir + "/run");
  ASSERT_EQ(trained.status, 0) << trained.output;
  EXPECT_NE(trained.output.find("has no folder for 1 of the model's 3 classes (class0)"),
            std::string::npos)
      << trained.output;
  const nlohmann::json s = summary_of(dir + "/run");
  EXPECT_EQ(s.at("config").at("class_names"),
            (std::vector<std::string>{"class0", "class1", "class2"}));
  EXPECT_GT(s.at("validation_accuracy").get<double>(), 0.6);

  const testing::CommandResult evaluated = run("evaluate " + dir + "/run --json");
  ASSERT_EQ(evaluated.status, 0) << evaluated.output;
  const nlohmann::json e =
      nlohmann::json::parse(evaluated.output.substr(evaluated.output.find('{')));
  EXPECT_EQ(e.at("examples"), 120);
  EXPECT_NEAR(e.at("accuracy").get<double>(), s.at("validation_accuracy").get<double>(), 1e-6);

  expect_one_line_error("evaluate " + dir + "/run --data " + dir + "/odd",
                        "class5 that the model does not know");
  // The training folder with a class more: the resume is refused, naming
  // them (after the validation folder's warning, now for 2 of 4 classes).
  write_image_folder(dir + "/train", {0, 1, 2, 3}, 10);
  const testing::CommandResult resumed = run("train --output " + dir + "/run --resume --epochs 4");
  EXPECT_EQ(resumed.status, 1) << resumed.output;
  EXPECT_NE(resumed.output.find("tandem: error: cannot resume"), std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("it was trained on classes [\"class0\",\"class1\",\"class2\"] "
                                "but this run's data has "
                                "[\"class0\",\"class1\",\"class2\",\"class3\"]"),
            std::string::npos)
      << resumed.output;
}

// A run on other data without validation data has nothing held out:
// evaluate asks for --data rather than report the training data's figures
// (it did) or Fashion-MNIST's (what it did when summary.json was missing).
TEST(UserData, EvaluateAsksForDataWhenTheRunHeldNoneOut) {
  const std::string dir = tmp("user-evaluate-no-validation");
  write_image_folder(dir + "/train", {0, 1, 2}, 20);
  write(dir + "/mlp3.toml", kMlp3);
  const testing::CommandResult trained =
      run("train --model " + dir + "/mlp3.toml --data " + dir +
          "/train --batch-size 30 --epochs 1 --quiet --output " + dir + "/run");
  ASSERT_EQ(trained.status, 0) << trained.output;
  expect_one_line_error("evaluate " + dir + "/run",
                        "trained on '" + fs::absolute(dir + "/train").string() +
                            "' without --validation-data: say what to evaluate on with --data");
  const testing::CommandResult chosen =
      run("evaluate " + dir + "/run --json --data " + dir + "/train");
  ASSERT_EQ(chosen.status, 0) << chosen.output;
  EXPECT_NE(chosen.output.find("\"examples\":60"), std::string::npos) << chosen.output;
  fs::remove(dir + "/run/summary.json");  // as a run killed before its end leaves it
  expect_one_line_error("evaluate " + dir + "/run",
                        "has no summary.json (stopped before its end) and trained on --data");
}

// A run records its paths absolute: it resumes from any directory, and a
// resume may name the data by another path to the same place.
TEST(UserData, ARunStartedWithRelativePathsResumesFromAnywhere) {
  const std::string dir = tmp("user-relative-paths");
  write_image_folder(dir + "/train", {0, 1, 2}, 20);
  write(dir + "/mlp3.toml", kMlp3);
  const std::string cli = TANDEM_CLI_PATH;
  const testing::CommandResult trained =
      testing::shell("cd " + dir + " && " + cli +
                     " train --model mlp3.toml --data train --batch-size 30 --epochs 3 "
                     "--stop-after-epochs 1 --quiet --output run 2>&1");
  ASSERT_EQ(trained.status, 0) << trained.output;
  const testing::CommandResult resumed = testing::shell(
      "cd / && " + cli + " train --output " + dir + "/run --resume --epochs 2 --quiet 2>&1");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  const testing::CommandResult again = testing::shell(
      "cd " + dir + "/train && " + cli + " train --output ../run --resume --epochs 3 --data " +
      "../train --quiet 2>&1");
  EXPECT_EQ(again.status, 0) << again.output;
  EXPECT_EQ(summary_of(dir + "/run").at("history").size(), 3u);
}

TEST(UserData, ImageFolderAndCsvRegressionTrain) {
  // A folder of PNGs, one sub-folder per class (3 classes of Fashion-MNIST).
  const std::string dir = tmp("user-folder");
  write_image_folder(dir + "/images", {0, 1, 2}, 100);
  write(dir + "/mlp3.toml", kMlp3);
  const testing::CommandResult folder =
      run("train --model " + dir + "/mlp3.toml --data " + dir + "/images --validation-data " + dir +
          "/images --batch-size 30 --epochs 3 --schedule constant --quiet --output " + dir +
          "/run-folder");
  ASSERT_EQ(folder.status, 0) << folder.output;
  EXPECT_GT(summary_of(dir + "/run-folder").at("validation_accuracy").get<double>(), 0.6);

  // A CSV regression: three feature columns into one vector, a target column.
  testing::write_regression_csv(dir + "/reg.csv", 600, 3, 2);
  write(dir + "/reg.toml",
        "format = \"csv\"\nfiles = [\"reg.csv\"]\nshuffle = 600\ninput = \"x\"\nlabel = "
        "\"y\"\n[features.x]\ncolumns = [\"x0\", \"x1\", \"x2\"]\n[features.y]\ncolumns = "
        "[\"y\"]\n");
  write(dir + "/regressor.toml",
        "input_shape = [3]\n[[layers]]\ntype = \"dense\"\nunits = 32\nactivation = "
        "\"relu\"\n[[layers]]\ntype = \"dense\"\nunits = 1\n");
  // Keras's name for the loss (mse) is mean_squared_error, with its metrics.
  const testing::CommandResult csv = run(
      "train --model " + dir + "/regressor.toml --data " + dir + "/reg.toml --validation-data " +
      dir + "/reg.toml --loss mse --batch-size 32 --epochs 4 --quiet --output " + dir + "/run-csv");
  ASSERT_EQ(csv.status, 0) << csv.output;
  const nlohmann::json s = summary_of(dir + "/run-csv");
  const auto& history = s.at("history");
  EXPECT_LT(history.back().at("train_loss").get<double>(),
            0.5 * history.front().at("train_loss").get<double>());
  EXPECT_LT(s.at("validation_rmse").get<double>(), 0.2);
  EXPECT_EQ(s.at("config").at("loss"), "mean_squared_error(labels=y)");
  // tandem evaluate rebuilds the model file, the loss, the metrics and the
  // validation data from the run.
  const testing::CommandResult e = run("evaluate " + dir + "/run-csv --json");
  ASSERT_EQ(e.status, 0) << e.output;
  const nlohmann::json j = nlohmann::json::parse(e.output.substr(e.output.find('{')));
  EXPECT_EQ(j.at("examples"), 600);
  EXPECT_NEAR(j.at("rmse").get<double>(), s.at("validation_rmse").get<double>(), 1e-6);
  EXPECT_NEAR(j.at("loss").get<double>(), s.at("validation_loss").get<double>(), 1e-6);
}

// 200 MB of records (a 100 kB padding feature the spec does not read) stream
// through a process whose resident set stays far below the file's size.
TEST(UserData, ATfrecordLargerThanTheResidentSetStreams) {
  const std::string dir = tmp("user-large");
  fs::create_directories(dir);
  std::vector<std::string> records;
  const std::string padding(100000, 'p');
  for (int i = 0; i < 2000; ++i) {
    data::Feature x{.kind = data::Feature::Kind::float_list};
    x.floats = {static_cast<float>(i % 7) / 7.0f, static_cast<float>(i % 3) / 3.0f};
    data::Feature y{.kind = data::Feature::Kind::float_list};
    y.floats = {x.floats[0] - x.floats[1]};
    data::Feature pad{.kind = data::Feature::Kind::bytes_list};
    pad.bytes = {padding};
    records.push_back(data::encode_example({{"x", x}, {"y", y}, {"padding", pad}}));
  }
  data::write_tfrecord(dir + "/big.tfrecord", records);
  records.clear();
  const auto file_bytes = static_cast<int64_t>(fs::file_size(dir + "/big.tfrecord"));
  ASSERT_GT(file_bytes, 200'000'000);
  write(dir + "/big.toml",
        "format = \"tfrecord\"\nfiles = [\"big.tfrecord\"]\ninput = \"x\"\nlabel = \"y\"\n"
        "[features.x]\ntype = \"float\"\nshape = [2]\n[features.y]\ntype = \"float\"\n");
  write(dir + "/model.toml", "input_shape = [2]\n[[layers]]\ntype = \"dense\"\nunits = 1\n");
  const testing::CommandResult r =
      run("train --model " + dir + "/model.toml --data " + dir +
          "/big.toml --loss mean_squared_error --batch-size 100 --epochs 1 --quiet --output " +
          dir + "/run");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json s = summary_of(dir + "/run");
  EXPECT_EQ(s.at("history")[0].at("train_examples"), 2000);
  const int64_t peak = s.at("monitor").at("peak_rss_bytes").get<int64_t>();
  EXPECT_GT(peak, 0);
  EXPECT_LT(peak, file_bytes / 2) << "peak resident set " << peak << " bytes for a file of "
                                  << file_bytes;
  fs::remove(dir + "/big.tfrecord");
}

TEST(UserData, BadModelFilesSpecificationsAndDataAreOneClearError) {
  const std::string dir = tmp("user-bad");
  testing::write_regression_csv(dir + "/reg.csv", 50, 3, 2);
  const std::string good_spec =
      "format = \"csv\"\nfiles = [\"reg.csv\"]\ninput = \"x\"\nlabel = \"y\"\n[features.x]\n"
      "columns = [\"x0\", \"x1\", \"x2\"]\n[features.y]\ncolumns = [\"y\"]\n";
  write(dir + "/reg.toml", good_spec);
  write(dir + "/model.toml", "input_shape = [3]\n[[layers]]\ntype = \"dense\"\nunits = 1\n");
  const std::string regression =
      " --loss mean_squared_error --batch-size 16 --epochs 1 --output " + dir + "/run";
  // Model files: an unknown layer, a shape mismatch with the data (line named).
  write(dir + "/unknown.toml",
        "input_shape = [3]\n[[layers]]\ntype = \"dense\"\nunits = 4\n"
        "[[layers]]\ntype = \"lstm\"\n");
  expect_one_line_error(
      "train --model " + dir + "/unknown.toml --data " + dir + "/reg.toml" + regression,
      "unknown.toml:6: layer 1 (lstm)");
  write(dir + "/flat.toml",
        "input_shape = [3]\n[[layers]]\ntype = \"conv2d\"\nfilters = 2\n"
        "kernel = 3\n");
  expect_one_line_error(
      "train --model " + dir + "/flat.toml --data " + dir + "/reg.toml" + regression,
      "flat.toml:2");
  write(dir + "/wide.toml", "input_shape = [5]\n[[layers]]\ntype = \"dense\"\nunits = 1\n");
  expect_one_line_error(
      "train --model " + dir + "/wide.toml --data " + dir + "/reg.toml" + regression,
      "the model does not take the training data (a training step on 4 of its examples, traced "
      "for the memory plan): linear: input (4, 3) does not fit weight (1, 5)");
  // Specifications: a missing feature, a wrong dtype, a typo, a missing file.
  write(dir + "/missing.toml",
        "format = \"csv\"\nfiles = [\"reg.csv\"]\ninput = \"x\"\nlabel = "
        "\"target\"\n[features.x]\ncolumns = [\"x0\"]\n");
  expect_one_line_error(
      "train --model " + dir + "/model.toml --data " + dir + "/missing.toml" + regression,
      "label feature 'target' is not among");
  write(dir + "/dtype.toml",
        "format = \"tfrecord\"\nfiles = [\"reg.csv\"]\ninput = \"x\"\n"
        "label = \"x\"\n[features.x]\ntype = \"int64\"\ndtype = \"f64\"\n");
  expect_one_line_error(
      "train --model " + dir + "/model.toml --data " + dir + "/dtype.toml" + regression, "f64");
  write(dir + "/typo.toml", good_spec + "shufle = 10\n");
  expect_one_line_error(
      "train --model " + dir + "/model.toml --data " + dir + "/typo.toml" + regression,
      "unknown key 'shufle'");
  write(dir + "/nofile.toml", "format = \"csv\"\nfiles = [\"nothere.csv\"]\n");
  expect_one_line_error(
      "train --model " + dir + "/model.toml --data " + dir + "/nofile.toml" + regression,
      "nofile.toml:2: no file");
  expect_one_line_error(
      "train --model " + dir + "/model.toml --data " + dir + "/none.toml" + regression,
      "no data specification");
  // Data: an image that does not decode.
  data::Feature junk{.kind = data::Feature::Kind::bytes_list};
  junk.bytes = {"not an image at all"};
  data::Feature label{.kind = data::Feature::Kind::int64_list};
  label.int64s = {1};
  data::write_tfrecord(
      dir + "/junk.tfrecord",
      std::vector<std::string>(4, data::encode_example({{"image", junk}, {"label", label}})));
  write(dir + "/junk.toml",
        "format = \"tfrecord\"\nfiles = [\"junk.tfrecord\"]\n"
        "[features.image]\ntype = \"bytes\"\ndecode = \"image\"\n"
        "[features.label]\ntype = \"int64\"\n");
  expect_one_line_error("train --model mlp --batch-size 4 --epochs 1 --data " + dir +
                            "/junk.toml --output " + dir + "/run-junk",
                        "image");
  expect_one_line_error("train --model mlp --data " + dir +
                            "/junk.toml --train-examples 5 --output " + dir + "/run-junk2",
                        "--train-examples");
  expect_one_line_error("train --validation-data " + dir + "/junk.toml --output " + dir + "/run-v",
                        "--validation-data needs --data");
  expect_one_line_error("train --model " + dir + "/model.toml --data " + dir + "/reg.toml" +
                            regression + "2 --metrics f1",
                        "unknown metric 'f1'");
  expect_one_line_error("train --model " + dir + "/model.toml --data " + dir +
                            "/reg.toml --loss hinge --output " + dir + "/run3",
                        "unknown loss 'hinge'");
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// tandem data text and a gpt trained from what it wrote, then evaluated.
TEST(LanguageModel, TextCorpusTrainsAndEvaluatesAGpt) {
  const std::string dir = testing::tmp("lm"), corpus = dir + "/corpus.txt";
  std::string text;
  for (int i = 0; i < 400; ++i) text += "In the beginning God created the heaven and the earth.\n";
  fs::create_directories(dir);
  std::ofstream(corpus) << text;
  auto made = testing::run("data text --corpus " + corpus + " --output " + dir +
                           "/data --context 32 --records-per-shard 200");
  ASSERT_EQ(made.status, 0) << made.output;
  EXPECT_TRUE(fs::exists(dir + "/data/train-00000-of-00004.tfrecord")) << made.output;
  EXPECT_TRUE(fs::exists(dir + "/data/validation.toml"));
  const std::string run_dir = dir + "/run";
  auto trained = testing::run(
      "train --model gpt --model-options layers=1,width=32,heads=2,context=32 --data " + dir +
      "/data/train.toml --validation-data " + dir +
      "/data/validation.toml --metrics perplexity,bits_per_byte --optimizer adamw --lr 0.01 "
      "--clip-norm 1 --batch-size 16 --epochs 2 --quiet --output " +
      run_dir);
  ASSERT_EQ(trained.status, 0) << trained.output;
  std::ifstream in(run_dir + "/summary.json");
  const nlohmann::json s = nlohmann::json::parse(in);
  // One repeated sentence: 80 steps take it far below the uniform 8 bits
  // per byte (to about 2.7).
  EXPECT_LT(s["validation_bits_per_byte"].get<double>(), 3.5) << s.dump();
  EXPECT_NEAR(s["validation_perplexity"].get<double>(),
              std::exp2(s["validation_bits_per_byte"].get<double>()), 1e-3);
  // With --clip-norm every step line carries the gradient norm before clipping.
  std::ifstream metrics(run_dir + "/metrics.jsonl");
  int steps = 0;
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.at("type") != "step") continue;
    ++steps;
    ASSERT_TRUE(j.at("gradient_norm").is_number()) << line;
    EXPECT_GT(j.at("gradient_norm").get<double>(), 0.0) << line;
  }
  EXPECT_GT(steps, 0);
  auto evaluated = testing::run("evaluate " + run_dir + " --json");
  ASSERT_EQ(evaluated.status, 0) << evaluated.output;
  EXPECT_NE(evaluated.output.find("bits_per_byte"), std::string::npos) << evaluated.output;
  auto onnx = testing::run("export " + run_dir + " --format onnx");
  ASSERT_EQ(onnx.status, 0) << onnx.output;
  EXPECT_NE(onnx.output.find("input (N, T) int64 tokens with T up to 32, output logits (N, T, "
                             "vocabulary)"),
            std::string::npos)
      << onnx.output;
  EXPECT_TRUE(fs::exists(run_dir + "/model.onnx"));
  auto generated =
      testing::run("generate " + run_dir + " --prompt 'In the' --tokens 20 --seed 1", true);
  ASSERT_EQ(generated.status, 0) << generated.output;
  const auto printed =
      testing::run("generate " + run_dir + " --prompt 'In the' --tokens 20 --seed 1").output;
  EXPECT_EQ(printed.size(), 6u + 20u + 1u) << printed;  // prompt, the new bytes, a newline
  EXPECT_EQ(printed.substr(0, 6), "In the");
  testing::expect_one_line_error("generate " + run_dir + " --prompt '" + std::string(40, 'x') + "'",
                                 "longer than the model's context of 32");
  testing::expect_one_line_error("generate " + run_dir + " --prompt x --temperature -1",
                                 "temperature");
  testing::expect_one_line_error("generate " + dir + " --prompt x", "holds no checkpoint");
  // A negative seed wrapped to 2^64 - 1 (train's is refused).
  testing::expect_one_line_error("generate " + run_dir + " --prompt x --seed -1",
                                 "--seed must be a whole number from 0 to");
  // The same shards train a Transformer written as a model file.
  const std::string model_file = dir + "/tiny_gpt.toml";
  std::ofstream(model_file)
      << "input_shape = [32]\ninput_dtype = \"i32\"\nlayers = [\n"
         "  { type = \"embedding\", vocabulary = 256, dim = 32 },\n"
         "  { type = \"position_embedding\" },\n"
         "  { type = \"residual\", layers = [ { type = \"layer_norm\" }, "
         "{ type = \"attention\", heads = 2 } ] },\n"
         "  { type = \"residual\", layers = [ { type = \"layer_norm\" }, "
         "{ type = \"dense\", units = 64, activation = \"gelu_tanh\" }, "
         "{ type = \"dense\", units = 32 } ] },\n"
         "  { type = \"layer_norm\" },\n  { type = \"dense\", units = 256 },\n]\n";
  auto from_file = testing::run("train --model " + model_file + " --data " + dir +
                                "/data/train.toml --validation-data " + dir +
                                "/data/validation.toml --metrics bits_per_byte --optimizer adamw "
                                "--lr 0.01 --batch-size 16 --epochs 2 --quiet --output " +
                                dir + "/run_file");
  ASSERT_EQ(from_file.status, 0) << from_file.output;
  std::ifstream file_summary(dir + "/run_file/summary.json");
  const nlohmann::json f = nlohmann::json::parse(file_summary);
  EXPECT_LT(f["validation_bits_per_byte"].get<double>(), 3.5) << f.dump();
  // ... and generates text like the built-in.
  const auto file_text = testing::run("generate " + dir +
                                      "/run_file --prompt 'In the' --tokens 12 "
                                      "--seed 2");
  ASSERT_EQ(file_text.status, 0) << file_text.output;
  EXPECT_EQ(file_text.output.size(), 6u + 12u + 1u) << file_text.output;
}

TEST(LanguageModel, BadCorporaAndModelOptionsAreOneClearError) {
  const std::string dir = testing::tmp("lm_bad");
  testing::expect_one_line_error(
      "data text --corpus " + dir + "/missing.txt --output " + dir + "/out", "cannot open");
  fs::create_directories(dir);
  std::ofstream(dir + "/short.txt") << "too short\n";
  testing::expect_one_line_error(
      "data text --corpus " + dir + "/short.txt --output " + dir + "/out", "too short");
  testing::expect_one_line_error(
      "data text --corpus " + dir + "/short.txt --output " + dir + "/out --validation-fraction 1.5",
      "validation_fraction (--validation-fraction) must be in (0, 1)");
  testing::expect_one_line_error("train --model gpt --model-options layerz=2 --epochs 1",
                                 "no setting 'layerz'");
  testing::expect_one_line_error("train --model gpt --model-options width=30,heads=4",
                                 "not divisible");
  testing::expect_one_line_error("train --model mlp --clip-norm -1 --train-examples 10 --epochs 1",
                                 "clip norm");
}

}  // namespace
}  // namespace tandem
