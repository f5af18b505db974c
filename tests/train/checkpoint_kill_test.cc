// SIGKILL while a checkpoint is being written: the file at the checkpoint's
// path is always a whole checkpoint, the previous one or the new one, never
// a torn mixture (save_checkpoint writes a temporary file, syncs it and
// renames it over the old one).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "tandem/base/parallel.h"
#include "tandem/base/random.h"
#include "tandem/train/checkpoint.h"

namespace tandem::train {
namespace {

namespace fs = std::filesystem;

// A checkpoint of `generation`: 8 MiB, so that a write takes long enough
// for kills to land inside it.
Checkpoint generation_of(int64_t generation) {
  Checkpoint c;
  c.metadata = {{"generation", std::to_string(generation)}};
  c.tensors = {{"w", Tensor::full(Shape{2 << 20}, static_cast<float>(generation))}};
  return c;
}

TEST(CheckpointKill, AKilledWriterLeavesAWholeCheckpoint) {
  const fs::path dir = fs::path(TANDEM_TEST_TMPDIR) / "checkpoint_kill";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "model.tckpt").string();
  // No OpenMP team in this process before fork(): libgomp's does not survive it.
  set_num_threads(1);
  save_checkpoint(path, generation_of(0));
  Generator delays(11);
  for (int round = 0; round < 12; ++round) {
    int progress[2];
    ASSERT_EQ(pipe(progress), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Rewrite the checkpoint, generation after generation, until killed,
      // reporting each finished write.
      close(progress[0]);
      for (int64_t g = 1;; ++g) {
        save_checkpoint(path, generation_of(g));
        if (write(progress[1], &g, sizeof g) != sizeof g) _exit(1);
      }
    }
    close(progress[1]);
    // After the child's first finished write (however loaded the machine),
    // kill it at a different moment of a later write each round.
    int64_t finished = 0;
    ASSERT_EQ(read(progress[0], &finished, sizeof finished), static_cast<ssize_t>(sizeof finished));
    std::this_thread::sleep_for(std::chrono::milliseconds(delays.next_below(60)));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    while (read(progress[0], &finished, sizeof finished) == sizeof finished) {
    }
    close(progress[0]);
    ASSERT_TRUE(WIFSIGNALED(status));
    const Checkpoint loaded = load_checkpoint(path);  // throws on a torn file
    const int64_t generation = std::stoll(loaded.meta("generation"));
    // The last finished write, or the one after it if the kill came between
    // its rename and its report.
    EXPECT_TRUE(generation == finished || generation == finished + 1)
        << "generation " << generation << " after " << finished << " finished writes";
    const Tensor& w = loaded.tensor("w");
    ASSERT_EQ(w.numel(), 2 << 20);
    const float* values = w.data<float>();
    for (int64_t i = 0; i < w.numel(); i += 4099) {
      ASSERT_EQ(values[i], static_cast<float>(generation)) << "element " << i;
    }
    ASSERT_EQ(values[w.numel() - 1], static_cast<float>(generation));
  }
}

}  // namespace
}  // namespace tandem::train
