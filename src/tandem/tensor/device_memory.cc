#include "tandem/tensor/device_memory.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "tandem/base/error.h"
#include "tandem/tensor/convert.h"
#include "tandem/tensor/detail/device_backend.h"

namespace tandem::detail {
namespace {

constexpr size_t kHostAlignment = 64;

bool on_host(Device device) {
  return device.kind == DeviceKind::cpu;
}

}  // namespace

void* device_allocate(Device device, size_t bytes) {
  if (on_host(device)) {
    const size_t size = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    return std::aligned_alloc(kHostAlignment, size == 0 ? kHostAlignment : size);
  }
  return require_device_backend(device).allocate(device, bytes);
}

void device_release(Device device, void* block) {
  if (on_host(device)) return std::free(block);
  require_device_backend(device).release(device, block);
}

void device_retire(Device device, void* block) {
  if (!on_host(device)) require_device_backend(device).retire(device, block);
}

void device_reuse(Device device, void* block) {
  if (!on_host(device)) require_device_backend(device).reuse(device, block);
}

void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (on_host(dst_device) && on_host(src_device)) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const Device device = on_host(dst_device) ? src_device : dst_device;
  require_device_backend(device).copy(dst, dst_device, src, src_device, bytes);
}

void device_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                    Device device) {
  if (on_host(device)) return convert(src, src_dtype, dst, dst_dtype, n);
  require_device_backend(device).convert(src, src_dtype, dst, dst_dtype, n, device);
}

void device_fill(void* dst, DType dtype, float value, int64_t n, Device device) {
  if (n <= 0) return;
  if (!on_host(device)) return require_device_backend(device).fill(dst, dtype, value, n, device);
  // +0 only (its bits are all zero in every dtype; -0 is not).
  if (value == 0.0f && !std::signbit(value)) {
    std::memset(dst, 0, static_cast<size_t>(n) * dtype_size(dtype));
    return;
  }
  if (dtype == DType::f32) {
    std::fill_n(static_cast<float*>(dst), n, value);
    return;
  }
  // Convert once, then replicate the element's bytes.
  const size_t size = dtype_size(dtype);
  alignas(8) unsigned char element[8];  // the widest dtype, i64 (4 bytes overflowed)
  convert(&value, DType::f32, element, dtype, 1);
  auto* out = static_cast<unsigned char*>(dst);
  for (int64_t i = 0; i < n; ++i) std::memcpy(out + i * size, element, size);
}

}  // namespace tandem::detail
