#pragma once
// Private: the seam between tensor and the back end of a device kind other than the
// CPU: device memory, copies, conversions, synchronisation, timeline marks
// and the device count. A back end registers itself when its library code
// is loaded (CUDA's: tensor/cuda/backend.cc, built with the toolkit); tensor
// calls it through device_backend() and never includes a back end's
// headers. The CPU is not behind this interface: host memory and copies are
// device_memory.cc's own.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tandem/tensor/device.h"
#include "tandem/tensor/dtype.h"

namespace tandem::detail {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // Devices of this kind, virtual ones included, and the physical ones
  // under them; set_devices_per_physical splits each physical device.
  virtual int device_count() = 0;
  virtual int physical_device_count() = 0;
  virtual void set_devices_per_physical(int count) = 0;

  // device_memory.h's operations for a device of this kind (a copy has at
  // least one side on it); allocate returns nullptr when the device is out
  // of memory.
  virtual void* allocate(Device device, size_t bytes) = 0;
  virtual void release(Device device, void* block) = 0;
  virtual void retire(Device device, void* block) = 0;
  virtual void reuse(Device device, void* block) = 0;
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t bytes) = 0;
  virtual void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                       Device device) = 0;
  virtual void fill(void* dst, DType dtype, float value, int64_t n, Device device) = 0;

  // The calling thread's queued work on `device`, and every thread's.
  virtual void synchronize(Device device) = 0;
  virtual void synchronize_all(Device device) = 0;

  // A timeline mark behind the calling thread's queued work (DeviceMark),
  // and the seconds between two of them.
  virtual std::shared_ptr<void> record_mark(Device device) = 0;
  virtual double seconds_between(void* earlier, void* later) = 0;
};

// The back end of `kind`; nullptr for the CPU and for a kind this build has
// no back end for.
DeviceBackend* device_backend(DeviceKind kind);

// The back end of `kind`, or NotImplemented naming `device` and how to get
// a build that has one.
DeviceBackend& require_device_backend(Device device);

// Called once per kind by the back end, while its library code loads.
void register_device_backend(DeviceKind kind, DeviceBackend& backend);

}  // namespace tandem::detail
