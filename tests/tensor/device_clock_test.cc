// Device marks on the CPU are the host clock: the time between two marks
// covers the work between them. (GPU marks: tests/gpu.)
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tandem/base/error.h"
#include "tandem/tensor/device_clock.h"

namespace tandem {
namespace {

TEST(DeviceClock, CpuMarksMeasureTheTimeBetweenThem) {
  const DeviceMark first = DeviceMark::record(cpu_device());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const DeviceMark second = DeviceMark::record(cpu_device());
  EXPECT_GE(first.seconds_until(second), 0.02);
  EXPECT_LE(second.seconds_until(first), -0.02);
  EXPECT_EQ(first.seconds_until(first), 0.0);
}

TEST(DeviceClock, AGpuMarkNeedsAGpu) {
  // Without a GPU (or a CUDA build) the mark is an error that says why.
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_THROW(DeviceMark::record(Device{DeviceKind::cuda, 0}), Error);
}

}  // namespace
}  // namespace tandem
