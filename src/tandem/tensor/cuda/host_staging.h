#pragma once
// Page-locked (pinned) staging for copies from ordinary host memory to a
// GPU. From pageable memory cudaMemcpyAsync is not asynchronous: the driver
// stages through a small buffer of its own and, for anything larger, waits
// for the DMA, which is queued behind every kernel already on the stream;
// the replica's thread then sits idle until its GPU has caught up. Copied
// into a pinned block first, the source is free at once, the DMA runs at
// the link's full rate, and the thread goes on queueing work (PyTorch's
// pin_memory with non_blocking copies, done inside the copy).

#include <cstddef>

#include "tandem/tensor/device.h"

namespace tandem::cuda {

// Copies `bytes` from pageable host memory at src to device memory at dst,
// in order on the calling thread's stream, through a pinned block that is
// reused once the DMA out of it has run. Returns false, having copied
// nothing, when the copy is too large to stage (one-off loads such as a
// checkpoint's parameters) or the staging pool is full of copies still in
// flight; the caller then copies directly.
bool copy_to_device_staged(void* dst, Device device, const void* src, size_t bytes);

// Bytes of pinned host memory the staging pools hold (all devices).
size_t staging_bytes();

// Limits: copies above kMaxStagedCopy go directly; each device's pool holds
// at most kMaxStagingPerDevice bytes of pinned memory.
inline constexpr size_t kMaxStagedCopy = size_t{16} << 20;
inline constexpr size_t kMaxStagingPerDevice = size_t{64} << 20;

}  // namespace tandem::cuda
