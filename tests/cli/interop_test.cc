// `tandem export` and `tandem train --init-from`: a run's weights out to a
// safetensors file and back into a new run, and the errors users meet.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "support/cli.h"
#include "support/tensorboard_events.h"

namespace {

namespace fs = std::filesystem;
using tandem::testing::CommandResult;
using tandem::testing::expect_one_line_error;
using tandem::testing::run;
using tandem::testing::tmp;

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const std::string kTiny = " --epochs 1 --train-examples 256 --test-examples 128 --threads 1 ";

TEST(CliInterop, ExportedWeightsStartANewRunExactly) {
  const std::string a = tmp("cli-interop-a"), b = tmp("cli-interop-b");
  ASSERT_EQ(run("train --model mlp" + kTiny + "--quiet --output " + a).status, 0);
  const CommandResult exported = run("export " + a);
  ASSERT_EQ(exported.status, 0) << exported.output;
  EXPECT_NE(exported.output.find("wrote " + a + "/model.safetensors (6 tensors, 669706 parameters"),
            std::string::npos)
      << exported.output;
  // A run from those weights whose updates are far below every weight's
  // last bit (lr 1e-30): its weights stay the exported ones bit for bit,
  // so its own export is the same file.
  const CommandResult started = run("train --model mlp" + kTiny + "--lr 1e-30 --seed 9 --output " +
                                    b + " --init-from " + a + "/model.safetensors");
  ASSERT_EQ(started.status, 0) << started.output;
  EXPECT_NE(started.output.find("initialised from " + a + "/model.safetensors: 6 tensors"),
            std::string::npos)
      << started.output;
  ASSERT_EQ(run("export " + b).status, 0);
  EXPECT_EQ(bytes_of(a + "/model.safetensors"), bytes_of(b + "/model.safetensors"));

  const CommandResult onnx = run("export " + a + " --format onnx");
  ASSERT_EQ(onnx.status, 0) << onnx.output;
  EXPECT_NE(onnx.output.find("wrote " + a + "/model.onnx (ONNX opset 13, input (N, 28, 28, 1)"),
            std::string::npos)
      << onnx.output;
  EXPECT_GT(fs::file_size(a + "/model.onnx"), fs::file_size(a + "/model.safetensors"));

  const CommandResult half =
      run("export " + a + " --dtype bf16 --output " + a + "/half.safetensors");
  ASSERT_EQ(half.status, 0) << half.output;
  EXPECT_LT(fs::file_size(a + "/half.safetensors"),
            fs::file_size(a + "/model.safetensors") / 2 + 4096);
}

TEST(CliInterop, BadExportsAndInitialisationsAreOneClearError) {
  const std::string a = tmp("cli-interop-bad");
  ASSERT_EQ(run("train --model mlp" + kTiny + "--quiet --output " + a).status, 0);
  ASSERT_EQ(run("export " + a).status, 0);
  const std::string weights = a + "/model.safetensors";
  expect_one_line_error("export " + a + " --format tflite", "--format must be safetensors or onnx");
  expect_one_line_error("export " + a + " --format onnx --dtype bf16", "ONNX export is f32");
  expect_one_line_error("export " + a + " --dtype i32", "--dtype must be f32, bf16 or f16");
  expect_one_line_error("export " + tmp("cli-interop-none"), "does not exist");
  const std::string empty = tmp("cli-interop-empty");
  fs::create_directories(empty);
  expect_one_line_error("export " + empty, "holds no checkpoint.tckpt");

  const std::string out_dir = tmp("cli-interop-out");
  const std::string out = " --output " + out_dir;
  expect_one_line_error(
      "train --model mlp" + kTiny + "--init-from " + a + "/absent.safetensors" + out,
      "cannot open safetensors file");
  expect_one_line_error("train --model mlp" + kTiny + "--non-strict" + out,
                        "--non-strict applies to --init-from");
  expect_one_line_error(
      "train --model mlp" + kTiny + "--resume --init-from " + weights + " --output " + a,
      "give one of them");
  // The servers' copy overwrote weights loaded into the replicas.
  expect_one_line_error("train --model mlp" + kTiny +
                            "--strategy parameter-server --devices 2 "
                            "--allow-oversubscription --init-from " +
                            weights + out,
                        "--init-from is not applied under --strategy parameter-server");
  // mlp weights into a cnn: every tensor named.
  expect_one_line_error("train --model cnn" + kTiny + "--init-from " + weights + out,
                        "missing: the model's, not in the file (6): 0.weight, 0.bias");
  expect_one_line_error(
      "train --model cnn" + kTiny + "--init-from " + weights + " --non-strict" + out,
      "mismatched shape or dtype");
  // A truncated file.
  const std::string cut = a + "/cut.safetensors";
  {
    const std::string all = bytes_of(weights);
    std::ofstream(cut, std::ios::binary) << all.substr(0, all.size() - 100);
  }
  expect_one_line_error("train --model mlp" + kTiny + "--init-from " + cut + out, "truncated");
  EXPECT_FALSE(fs::exists(out_dir));  // refused before anything was written
}

TEST(CliInterop, TensorBoardEventsHoldTheMetricsLogsFigures) {
  const std::string dir = tmp("cli-interop-tensorboard");
  ASSERT_EQ(run("train --model mlp" + kTiny +
                "--strategy mirrored --devices 2 "
                "--allow-oversubscription --quiet --output " +
                dir)
                .status,
            0);
  std::map<int64_t, double> losses;
  double validation_accuracy = -1.0;
  std::ifstream in(dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("type") == "step") losses[j.at("global_step")] = j.at("loss");
    if (j.at("type") == "epoch") validation_accuracy = j.at("validation_accuracy");
  }
  const auto events = tandem::testing::read_events(dir + "/tensorboard");
  ASSERT_EQ(events.size(), losses.size() + 2);  // the version, each step, the epoch
  EXPECT_EQ(events.front().file_version, "brain.Event:2");
  size_t steps = 0;
  for (const auto& e : events) {
    std::map<std::string, float> scalars(e.scalars.begin(), e.scalars.end());
    if (scalars.count("train/loss")) {
      ++steps;
      ASSERT_TRUE(losses.count(e.step)) << e.step;
      EXPECT_FLOAT_EQ(scalars.at("train/loss"), static_cast<float>(losses.at(e.step)));
      EXPECT_TRUE(scalars.count("replica_1/busy_fraction"));
      EXPECT_TRUE(scalars.count("replica_0/exposed_communication_seconds"));
      EXPECT_TRUE(scalars.count("memory/cpu:0/peak_bytes"));
      EXPECT_FALSE(scalars.count("train/gradient_norm"));  // not computed without --clip-norm
    }
    if (scalars.count("epoch/validation_accuracy")) {
      EXPECT_FLOAT_EQ(scalars.at("epoch/validation_accuracy"),
                      static_cast<float>(validation_accuracy));
      EXPECT_EQ(e.step, losses.rbegin()->first);
    }
  }
  EXPECT_EQ(steps, losses.size());

  const std::string off = tmp("cli-interop-no-tensorboard");
  ASSERT_EQ(run("train --model mlp" + kTiny + "--no-tensorboard --quiet --output " + off).status,
            0);
  EXPECT_FALSE(fs::exists(off + "/tensorboard"));
  expect_one_line_error("train --model mlp" + kTiny + "--no-monitor --tensorboard " + off,
                        "drop --no-monitor");
}

}  // namespace
