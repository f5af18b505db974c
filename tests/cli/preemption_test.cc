// What a preempted run keeps: SIGTERM (SLURM's, Kubernetes', a spot
// reclaim's) stops `tandem train` like Ctrl-C, with a checkpoint and exit
// status 143, and --resume finishes it; with --checkpoint-every N a run
// killed outright (SIGKILL) loses at most N steps; a `tandem tune search`
// killed outright takes its trials with it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/cli.h"
#include "tandem/train/evaluation.h"

extern char** environ;

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::run;
using testing::tmp;

// A run long enough to be stopped in its first epoch: 60,000 examples of
// batch 32 (1,875 steps) per epoch, 2 epochs.
const std::string kRun =
    "train --model mlp --test-examples 500 --epochs 2 --batch-size 32 --threads 1 "
    "--no-tensorboard --seed 5";
constexpr int64_t kStepsPerEpoch = 1875;

// Starts tandem with `arguments` (split at spaces), stdout and stderr into
// `log`; returns its pid.
pid_t spawn_tandem(const std::string& arguments, const std::string& log) {
  std::vector<std::string> args = {TANDEM_CLI_PATH};
  size_t at = 0;
  while (at < arguments.size()) {
    const size_t space = arguments.find(' ', at);
    const size_t end = space == std::string::npos ? arguments.size() : space;
    if (end > at) args.push_back(arguments.substr(at, end - at));
    at = end + 1;
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return error == 0 ? pid : -1;
}

// The step lines metrics.jsonl holds so far (0 before it exists).
int64_t steps_logged(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  int64_t steps = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"type\":\"step\"") != std::string::npos) ++steps;
  }
  return steps;
}

// Waits (at most 120 s) until the run has logged `steps` steps.
bool wait_for_steps(const std::string& run_dir, int64_t steps) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (steps_logged(run_dir) < steps) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

int64_t checkpoint_step(const std::string& run_dir) {
  return std::stoll(
      train::load_trainer_checkpoint(run_dir + "/checkpoint.tckpt").meta("global_step"));
}

TEST(Preemption, SigtermCheckpointsAndResumeFinishesTheRun) {
  const std::string dir = tmp("preempt-sigterm");
  fs::create_directories(dir);
  const pid_t pid = spawn_tandem(kRun + " --output " + dir + "/run", dir + "/log");
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_steps(dir + "/run", 20)) << read_file(dir + "/log");
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string log = read_file(dir + "/log");
  ASSERT_TRUE(WIFEXITED(status)) << log;
  ASSERT_EQ(WEXITSTATUS(status), 143) << log;
  EXPECT_NE(log.find("terminated (SIGTERM), saving a checkpoint"), std::string::npos) << log;
  EXPECT_NE(log.find("checkpoint saved to"), std::string::npos) << log;
  const int64_t stopped_at = checkpoint_step(dir + "/run");
  EXPECT_GE(stopped_at, 20);
  EXPECT_LT(stopped_at, kStepsPerEpoch) << "the run should stop in its first epoch";
  const nlohmann::json summary = nlohmann::json::parse(read_file(dir + "/run/summary.json"));
  EXPECT_TRUE(summary.at("interrupted").get<bool>());

  const CommandResult resumed = run(kRun + " --quiet --output " + dir + "/run --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  const nlohmann::json done = nlohmann::json::parse(read_file(dir + "/run/summary.json"));
  EXPECT_FALSE(done.at("interrupted").get<bool>());
  EXPECT_EQ(done.at("epochs"), 2);
  EXPECT_EQ(checkpoint_step(dir + "/run"), 2 * kStepsPerEpoch);
}

TEST(Preemption, CheckpointEveryBoundsWhatAKillLoses) {
  const std::string dir = tmp("preempt-kill");
  fs::create_directories(dir);
  const std::string command = kRun + " --checkpoint-every 10 --output " + dir + "/run";
  const pid_t pid = spawn_tandem(command, dir + "/log");
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_steps(dir + "/run", 35)) << read_file(dir + "/log");
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  // No epoch had ended: the checkpoint is a periodic one, 10 steps apart.
  const int64_t saved = checkpoint_step(dir + "/run");
  EXPECT_GE(saved, 30);
  EXPECT_LT(saved, kStepsPerEpoch);
  EXPECT_EQ(saved % 10, 0);
  const CommandResult resumed = run(command + " --quiet --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(checkpoint_step(dir + "/run"), 2 * kStepsPerEpoch);
  testing::expect_one_line_error(kRun + " --checkpoint-every -1 --output " + dir + "/bad",
                                 "--checkpoint-every");
}

// The trials' parent-death signal: a search killed outright (an OOM kill)
// used to leave its trials training on, unsupervised, for hours.
TEST(Preemption, AKilledSearchLeavesNoTrialRunning) {
  const std::string dir = tmp("preempt-search");
  fs::create_directories(dir);
  std::ofstream(dir + "/space.toml") << "[search]\ntrials = 1\nmin_epochs = 50\nmax_epochs = 50\n"
                                        "[space]\nlr = { choice = [0.05] }\n";
  const pid_t pid = spawn_tandem("tune search --space " + dir + "/space.toml --output " + dir +
                                     "/out --parallel 1 --model mlp --test-examples 500 "
                                     "--batch-size 32 --threads 1",
                                 dir + "/log");
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_steps(dir + "/out/trial-000", 5)) << read_file(dir + "/log");
  // (the bracket keeps pgrep's own shell, whose command line holds the
  // pattern, from matching it)
  const std::string trial = "pgrep -f '" + dir + "/out/trial-00[0]'";
  ASSERT_FALSE(testing::shell(trial).output.empty()) << "the trial should be running";
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!testing::shell(trial).output.empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string left = testing::shell(trial).output;
  EXPECT_TRUE(left.empty()) << "trial processes left behind: " << left;
  if (!left.empty()) testing::shell("pkill -9 -f '" + dir + "/out/trial-000'");
}

}  // namespace
}  // namespace tandem
