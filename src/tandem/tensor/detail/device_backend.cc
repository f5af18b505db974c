#include "tandem/tensor/detail/device_backend.h"

#include <array>
#include <atomic>

#include "tandem/base/error.h"

namespace tandem::detail {
namespace {

constexpr size_t kKinds = static_cast<size_t>(DeviceKind::cuda) + 1;

// Filled while the library loads (static initialisers), read afterwards.
std::array<std::atomic<DeviceBackend*>, kKinds>& registry() {
  static std::array<std::atomic<DeviceBackend*>, kKinds> backends{};
  return backends;
}

}  // namespace

DeviceBackend* device_backend(DeviceKind kind) {
  const auto at = static_cast<size_t>(kind);
  return at < kKinds ? registry()[at].load(std::memory_order_acquire) : nullptr;
}

DeviceBackend& require_device_backend(Device device) {
  if (DeviceBackend* backend = device_backend(device.kind)) return *backend;
  TANDEM_THROW(NotImplemented, device.to_string(),
               ": this build of tandem has no CUDA backend (configure with the CUDA toolkit "
               "installed, or -DTANDEM_WITH_CUDA=ON)");
}

void register_device_backend(DeviceKind kind, DeviceBackend& backend) {
  if (kind == DeviceKind::cpu) {
    TANDEM_THROW(InvalidArgument, "register_device_backend: the CPU has no registered back end");
  }
  DeviceBackend* expected = nullptr;
  if (!registry()[static_cast<size_t>(kind)].compare_exchange_strong(expected, &backend)) {
    TANDEM_THROW(InvalidArgument, "register_device_backend: a second back end for ",
                 Device{kind, 0}.to_string());
  }
}

}  // namespace tandem::detail
