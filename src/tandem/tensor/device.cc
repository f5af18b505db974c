#include "tandem/tensor/device.h"

#include <atomic>
#include <ostream>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/base/parse_number.h"
#include "tandem/tensor/detail/device_backend.h"

namespace tandem {
namespace {

constexpr int kMaxVirtualDevices = 1024;
std::atomic<int> configured_cpu_devices{0};  // 0: one per physical core
thread_local Device thread_device = cpu_device();

}  // namespace

Device current_device() {
  return thread_device;
}

DeviceScope::DeviceScope(Device device) : previous_(thread_device) {
  thread_device = device;
}

DeviceScope::~DeviceScope() {
  thread_device = previous_;
}

std::string Device::to_string() const {
  return std::string(kind == DeviceKind::cpu ? "cpu:" : "cuda:") + std::to_string(index);
}

Device parse_device(std::string_view text) {
  const auto colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  Device device;
  if (kind == "cpu") {
    device.kind = DeviceKind::cpu;
  } else if (kind == "cuda") {
    device.kind = DeviceKind::cuda;
  } else {
    TANDEM_THROW(InvalidArgument, "unknown device '", text, "' (expected cpu, cpu:N or cuda:N)");
  }
  if (colon != std::string_view::npos) {
    const std::optional<int> index = parse_number<int>(text.substr(colon + 1));
    if (!index || *index < 0) TANDEM_THROW(InvalidArgument, "bad device index in '", text, "'");
    device.index = *index;
  }
  return device;
}

int virtual_cpu_device_count() {
  const int configured = configured_cpu_devices.load();
  return configured > 0 ? configured : std::max(1, cpu_info().physical_cores);
}

std::vector<Device> virtual_cpu_devices() {
  std::vector<Device> devices;
  const int count = virtual_cpu_device_count();
  for (int i = 0; i < count; ++i) devices.push_back(cpu_device(i));
  return devices;
}

void set_virtual_cpu_device_count(int count) {
  if (count < 1 || count > kMaxVirtualDevices) {
    TANDEM_THROW(InvalidArgument, "virtual CPU device count must be in 1..", kMaxVirtualDevices,
                 ", got ", count);
  }
  configured_cpu_devices.store(count);
}

std::ostream& operator<<(std::ostream& out, const Device& device) {
  return out << device.to_string();
}

// A non-CPU device without a back end in this build has no queued work.
void synchronize(Device device) {
  if (detail::DeviceBackend* backend = detail::device_backend(device.kind)) {
    backend->synchronize(device);
  }
}

void synchronize_all(Device device) {
  if (detail::DeviceBackend* backend = detail::device_backend(device.kind)) {
    backend->synchronize_all(device);
  }
}

void set_cuda_devices_per_gpu(int count) {
  detail::DeviceBackend* backend = detail::device_backend(DeviceKind::cuda);
  if (backend == nullptr) {
    TANDEM_THROW(NotImplemented, "virtual GPU devices: this build of tandem has no CUDA backend");
  }
  backend->set_devices_per_physical(count);
}

int cuda_gpu_count() {
  detail::DeviceBackend* backend = detail::device_backend(DeviceKind::cuda);
  return backend != nullptr ? backend->physical_device_count() : 0;
}

bool cuda_built() {
  return detail::device_backend(DeviceKind::cuda) != nullptr;
}

int cuda_device_count() {
  detail::DeviceBackend* backend = detail::device_backend(DeviceKind::cuda);
  return backend != nullptr ? backend->device_count() : 0;
}

}  // namespace tandem
