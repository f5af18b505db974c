#pragma once
// Device memory for the tensor layer (tensor/device_memory.cc calls these for
// cuda devices): plain cudaMalloc blocks, never managed memory, and copies
// and conversions on the calling thread's stream.

#include <cstddef>
#include <cstdint>

#include "tandem/tensor/device.h"
#include "tandem/tensor/dtype.h"

namespace tandem::cuda {

// A block of `bytes` on `device`; nullptr when the device is out of memory.
void* allocate(Device device, size_t bytes);
void release(Device device, void* block);

// The caching allocator keeps freed blocks for reuse. A block retired into
// the cache may still be in use by work this thread queued; the next thread
// to reuse it waits (on the device, not the host) until that work is done.
void retire(Device device, void* block);
void reuse(Device device, void* block);

// Copies between any two of the host and CUDA devices. Returns when dst may
// be read by the calling thread: at once for device destinations (later work
// on this thread's stream runs after the copy), after the copy for host ones.
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
void zero(void* dst, Device device, size_t bytes);
// Element conversion and fill on the device (f32, bf16, f16, i32, u8).
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
             Device device);
void fill(void* dst, DType dtype, float value, int64_t n, Device device);

}  // namespace tandem::cuda
