#pragma once
// Raw memory of every device kind, for the Allocator and Tensor: the one
// place the tensor layer branches on the device (CPU: aligned host memory
// and memcpy; CUDA: tensor/cuda/memory.h). Everything above works on Tensors.

#include <cstddef>
#include <cstdint>

#include "tandem/tensor/device.h"
#include "tandem/tensor/dtype.h"

namespace tandem::detail {

// A block of at least `bytes` (64-byte aligned on the host); nullptr when the
// device is out of memory. Throws NotImplemented for a device kind this
// build has no backend for.
void* device_allocate(Device device, size_t bytes);
void device_release(Device device, void* block);
// Hooks of the caching allocator: a freed block enters / leaves its cache
// (CUDA fences the block against work still queued on it).
void device_retire(Device device, void* block);
void device_reuse(Device device, void* block);

// Copies bytes between any two devices; dst is readable by the calling
// thread when it returns.
void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// Element conversion (same device on both sides) and fill.
void device_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                    Device device);
void device_fill(void* dst, DType dtype, float value, int64_t n, Device device);

}  // namespace tandem::detail
