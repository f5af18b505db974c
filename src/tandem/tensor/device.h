#pragma once
// Devices: {kind, index}. On a machine without GPUs the CPU is split into
// virtual CPU devices (as TensorFlow does to test strategies without GPUs);
// each has its own Allocator and, at run time, its own replica thread.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

enum class DeviceKind : uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  // "cpu:0", "cuda:1"
  std::string to_string() const;
  bool operator==(const Device&) const = default;
};

inline Device cpu_device(int index = 0) {
  return Device{DeviceKind::cpu, index};
}

// The device new tensors go to when none is named: cpu:0 unless a DeviceScope
// on this thread says otherwise (tf.device / torch.cuda.device). Replica
// threads run under their device's scope, so that each replica's memory is
// accounted to its own device's allocator.
Device current_device();

class DeviceScope {
 public:
  explicit DeviceScope(Device device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  Device previous_;
};

// Parses "cpu", "cpu:3", "cuda:0". Throws InvalidArgument otherwise.
Device parse_device(std::string_view text);

// The virtual CPU devices of this process: cpu:0 .. cpu:(n-1). By default one
// per physical core. Thread-safe.
std::vector<Device> virtual_cpu_devices();
int virtual_cpu_device_count();
// Sets the number of virtual CPU devices (1..1024). Call before creating replicas.
void set_virtual_cpu_device_count(int count);

// The CUDA devices this process sees: cuda:0 .. cuda:(n-1); 0 when there is
// no GPU or driver, or tandem was built without CUDA. With k devices per GPU
// (below) there are k per GPU.
int cuda_device_count();
// The physical GPUs this process sees (0 without CUDA or a GPU).
int cuda_gpu_count();
// Whether this build has the CUDA back end (whatever the machine has).
bool cuda_built();
// Splits each GPU into `count` virtual GPU devices (1 to 64; TensorFlow's
// logical devices), so that strategies can run several replicas on one GPU
// (tests, and trying a multi-GPU recipe on one). Call before any tensor is
// on a GPU. Throws NotImplemented in a build without CUDA.
void set_cuda_devices_per_gpu(int count);

// Waits until the work the calling thread queued on `device` has run (GPU
// kernels are asynchronous); returns at once for CPU devices, whose kernels
// finish before they return.
void synchronize(Device device);
// Waits until the work every thread queued on the device's GPU has run:
// before one thread reads buffers another thread's kernels wrote.
void synchronize_all(Device device);

std::ostream& operator<<(std::ostream& out, const Device& device);

}  // namespace tandem
