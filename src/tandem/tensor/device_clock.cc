#include "tandem/tensor/device_clock.h"

#include "tandem/base/error.h"
#include "tandem/config.h"
#if TANDEM_HAVE_CUDA
#include "tandem/tensor/cuda/runtime.h"
#endif

namespace tandem {

DeviceMark DeviceMark::record(Device device) {
  DeviceMark mark;
  if (device.kind != DeviceKind::cpu) {
#if TANDEM_HAVE_CUDA
    mark.event_ = cuda::record_event(device);
#else
    TANDEM_THROW(NotImplemented, "no timeline for ", device.to_string(),
                 ": this build has no CUDA backend");
#endif
  }
  mark.host_ = std::chrono::steady_clock::now();
  return mark;
}

double DeviceMark::seconds_until(const DeviceMark& later) const {
  if ((event_ == nullptr) != (later.event_ == nullptr)) {
    TANDEM_THROW(InvalidArgument, "device marks of a GPU and of the CPU cannot be compared");
  }
#if TANDEM_HAVE_CUDA
  if (event_ != nullptr) return cuda::seconds_between_events(event_.get(), later.event_.get());
#endif
  return std::chrono::duration<double>(later.host_ - host_).count();
}

}  // namespace tandem
