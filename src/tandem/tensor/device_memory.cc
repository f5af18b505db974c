#include "tandem/tensor/device_memory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "tandem/base/error.h"
#include "tandem/config.h"
#include "tandem/tensor/convert.h"
#if TANDEM_HAVE_CUDA
#include "tandem/tensor/cuda/memory.h"
#endif

namespace tandem::detail {
namespace {

constexpr size_t kHostAlignment = 64;

bool on_host(Device device) {
  if (device.kind == DeviceKind::cpu) return true;
  if (TANDEM_HAVE_CUDA == 1) return false;
  TANDEM_THROW(NotImplemented, device.to_string(),
               ": this build of tandem has no CUDA backend (configure with the CUDA toolkit "
               "installed, or -DTANDEM_WITH_CUDA=ON)");
}

}  // namespace

void* device_allocate(Device device, size_t bytes) {
  if (on_host(device)) {
    const size_t size = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    return std::aligned_alloc(kHostAlignment, size == 0 ? kHostAlignment : size);
  }
#if TANDEM_HAVE_CUDA
  return cuda::allocate(device, bytes);
#else
  return nullptr;
#endif
}

void device_release(Device device, void* block) {
  if (on_host(device)) return std::free(block);
#if TANDEM_HAVE_CUDA
  cuda::release(device, block);
#endif
}

void device_retire([[maybe_unused]] Device device, [[maybe_unused]] void* block) {
#if TANDEM_HAVE_CUDA
  if (!on_host(device)) cuda::retire(device, block);
#endif
}

void device_reuse([[maybe_unused]] Device device, [[maybe_unused]] void* block) {
#if TANDEM_HAVE_CUDA
  if (!on_host(device)) cuda::reuse(device, block);
#endif
}

void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (on_host(dst_device) && on_host(src_device)) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if TANDEM_HAVE_CUDA
  cuda::copy(dst, dst_device, src, src_device, bytes);
#endif
}

void device_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                    Device device) {
  if (on_host(device)) return convert(src, src_dtype, dst, dst_dtype, n);
#if TANDEM_HAVE_CUDA
  cuda::convert(src, src_dtype, dst, dst_dtype, n, device);
#endif
}

void device_fill(void* dst, DType dtype, float value, int64_t n, Device device) {
  if (n <= 0) return;
  if (!on_host(device)) {
#if TANDEM_HAVE_CUDA
    if (value == 0.0f) {
      cuda::zero(dst, device, static_cast<size_t>(n) * dtype_size(dtype));
    } else {
      cuda::fill(dst, dtype, value, n, device);
    }
#endif
    return;
  }
  if (value == 0.0f) {
    std::memset(dst, 0, static_cast<size_t>(n) * dtype_size(dtype));
    return;
  }
  if (dtype == DType::f32) {
    std::fill_n(static_cast<float*>(dst), n, value);
    return;
  }
  // Convert once, then replicate the element's bytes.
  const size_t size = dtype_size(dtype);
  unsigned char element[4];
  convert(&value, DType::f32, element, dtype, 1);
  auto* out = static_cast<unsigned char*>(dst);
  for (int64_t i = 0; i < n; ++i) std::memcpy(out + i * size, element, size);
}

}  // namespace tandem::detail
