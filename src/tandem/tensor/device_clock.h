#pragma once
// Points on a device's timeline, for timing work a device runs
// asynchronously. A GPU runs the kernels a thread queued after the call
// that queued them returned, so host clocks around that call time the
// queueing, not the work: on a GPU a mark is an event recorded on the
// calling thread's stream behind the work queued so far. On the CPU a
// kernel's work is done when it returns, and a mark is the host clock.

#include <chrono>
#include <memory>

#include "tandem/tensor/device.h"

namespace tandem {

class DeviceMark {
 public:
  // A mark behind everything the calling thread has queued on `device`.
  static DeviceMark record(Device device);

  // Seconds from this mark to `later` (recorded after it, on the same
  // device) on the device's timeline; waits until the device reaches
  // `later`.
  double seconds_until(const DeviceMark& later) const;

 private:
  std::chrono::steady_clock::time_point host_{};
  std::shared_ptr<void> event_;  // the device back end's mark; null on the CPU
  DeviceKind kind_ = DeviceKind::cpu;
};

}  // namespace tandem
