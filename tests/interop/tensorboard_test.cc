// TensorBoard event files: framed as TFRecords with both CRCs, decoded by
// an independent reader (support/tensorboard_events.h), and readable up to
// the last whole record after a kill.
#include "tandem/interop/tensorboard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "support/tensorboard_events.h"
#include "tandem/base/error.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

std::string fresh(const std::string& name) {
  const fs::path dir = fs::path(TANDEM_TEST_TMPDIR) / "tensorboard" / name;
  fs::remove_all(dir);
  return dir.string();
}

TEST(TensorBoard, EventFilesHoldTheVersionThenEachStepsScalars) {
  const std::string dir = fresh("scalars");
  std::string path;
  {
    interop::EventWriter w(dir);
    path = w.path();
    w.scalars(1, {{"train/loss", 2.5}, {"train/learning_rate", 0.05}});
    w.scalars(2, {{"train/loss", 2.25}, {"train/gradient_norm", NAN}});  // NaN: left out
    w.scalars(300000000000, {{"epoch/validation_accuracy", 0.875}});
  }
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
  const auto events = testing::read_events(dir);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.7e9);  // seconds since 1970
  EXPECT_EQ(events[1].step, 1);
  ASSERT_EQ(events[1].scalars.size(), 2u);
  EXPECT_EQ(events[1].scalars[0], (std::pair<std::string, float>{"train/loss", 2.5f}));
  EXPECT_EQ(events[1].scalars[1], (std::pair<std::string, float>{"train/learning_rate", 0.05f}));
  ASSERT_EQ(events[2].scalars.size(), 1u);
  EXPECT_EQ(events[3].step, 300000000000);
  EXPECT_EQ(events[3].scalars[0].second, 0.875f);
  EXPECT_GE(events[3].wall_time, events[1].wall_time);
}

TEST(TensorBoard, AKilledWritersFileReadsUpToItsLastWholeRecord) {
  const std::string dir = fresh("killed");
  std::string path;
  {
    interop::EventWriter w(dir);
    path = w.path();
    for (int step = 1; step <= 3; ++step) w.scalars(step, {{"train/loss", 1.0 / step}});
    // Every record is flushed as written: the file is complete while open.
    EXPECT_EQ(data::count_tfrecord_records(path), 4);
  }
  fs::resize_file(path, fs::file_size(path) - 5);  // killed inside the last record
  data::TFRecordReader reader(path, data::Compression::none);
  int whole = 0;
  try {
    while (reader.next()) ++whole;
  } catch (const IoError&) {  // the cut record
  }
  EXPECT_EQ(whole, 3);
}

TEST(TensorBoard, AnUnwritableDirectoryIsAnError) {
  const std::string file = fresh("not_a_dir");
  fs::create_directories(fs::path(file).parent_path());
  std::ofstream(file) << "x";
  EXPECT_THROW(interop::EventWriter w(file + "/sub"), IoError);
}

}  // namespace
}  // namespace tandem
