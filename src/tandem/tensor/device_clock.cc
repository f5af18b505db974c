#include "tandem/tensor/device_clock.h"

#include "tandem/base/error.h"
#include "tandem/tensor/detail/device_backend.h"

namespace tandem {

DeviceMark DeviceMark::record(Device device) {
  DeviceMark mark;
  if (device.kind != DeviceKind::cpu) {
    mark.event_ = detail::require_device_backend(device).record_mark(device);
    mark.kind_ = device.kind;
  }
  mark.host_ = std::chrono::steady_clock::now();
  return mark;
}

double DeviceMark::seconds_until(const DeviceMark& later) const {
  if ((event_ == nullptr) != (later.event_ == nullptr)) {
    TANDEM_THROW(InvalidArgument, "device marks of a GPU and of the CPU cannot be compared");
  }
  if (event_ != nullptr) {
    return detail::require_device_backend(Device{kind_, 0})
        .seconds_between(event_.get(), later.event_.get());
  }
  return std::chrono::duration<double>(later.host_ - host_).count();
}

}  // namespace tandem
