// The CUDA back end of the tensor layer (tensor/detail/device_backend.h),
// registered for cuda devices while libtandem loads.
#include "tandem/tensor/cuda/memory.h"
#include "tandem/tensor/cuda/runtime.h"
#include "tandem/tensor/detail/device_backend.h"

namespace tandem::cuda {
namespace {

class CudaBackend final : public detail::DeviceBackend {
 public:
  int device_count() override { return cuda::device_count(); }
  int physical_device_count() override { return cuda::physical_device_count(); }
  void set_devices_per_physical(int count) override { set_devices_per_gpu(count); }

  void* allocate(Device device, size_t bytes) override { return cuda::allocate(device, bytes); }
  void release(Device device, void* block) override { cuda::release(device, block); }
  void retire(Device device, void* block) override { cuda::retire(device, block); }
  void reuse(Device device, void* block) override { cuda::reuse(device, block); }
  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            size_t bytes) override {
    cuda::copy(dst, dst_device, src, src_device, bytes);
  }
  void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
               Device device) override {
    cuda::convert(src, src_dtype, dst, dst_dtype, n, device);
  }
  void fill(void* dst, DType dtype, float value, int64_t n, Device device) override {
    if (value == 0.0f) {
      cuda::zero(dst, device, static_cast<size_t>(n) * dtype_size(dtype));
    } else {
      cuda::fill(dst, dtype, value, n, device);
    }
  }

  void synchronize(Device device) override { sync_stream(device); }
  void synchronize_all(Device device) override { sync_device(device); }

  std::shared_ptr<void> record_mark(Device device) override { return record_event(device); }
  double seconds_between(void* earlier, void* later) override {
    return seconds_between_events(earlier, later);
  }
};

const bool registered = [] {
  static CudaBackend backend;
  detail::register_device_backend(DeviceKind::cuda, backend);
  return true;
}();

}  // namespace
}  // namespace tandem::cuda
