#include "tandem/tensor/cuda/host_staging.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

constexpr size_t kSmallestBlock = size_t{64} << 10;

// A pinned block and the event recorded after the last DMA out of it: the
// block may be refilled once the event has completed.
struct Block {
  void* host = nullptr;
  size_t bytes = 0;
  cudaEvent_t drained = nullptr;
  bool filling = false;  // a thread is copying into it or queueing its DMA
};

struct Pool {
  std::mutex mutex;
  std::vector<Block> blocks;
  size_t bytes = 0;
};

std::atomic<size_t> total_bytes{0};

Pool& pool(Device device) {
  static std::mutex mutex;
  static auto* pools = new std::map<int, Pool>();  // never destroyed: copies may run at exit
  std::lock_guard<std::mutex> lock(mutex);
  return (*pools)[device.index];
}

bool drained(const Block& b) {
  const cudaError_t status = cudaEventQuery(b.drained);
  if (status == cudaErrorNotReady) {
    // Not an error, but the runtime may keep it as the last error, which
    // the next kernel launch's check would then report.
    cudaGetLastError();
    return false;
  }
  check(status, "a copy from pinned staging memory");
  return true;
}

void free_block(Pool& p, size_t i) {
  check(cudaEventDestroy(p.blocks[i].drained), "cudaEventDestroy");
  check(cudaFreeHost(p.blocks[i].host), "cudaFreeHost");
  p.bytes -= p.blocks[i].bytes;
  total_bytes -= p.blocks[i].bytes;
  p.blocks.erase(p.blocks.begin() + static_cast<std::ptrdiff_t>(i));
}

// Index of a block of at least `bytes` that is free to fill, marked filling;
// -1 when there is none and none can be made within the pool's limit.
// Called with the pool's mutex held and `device` current.
int take_block(Pool& p, size_t bytes) {
  int best = -1;
  for (size_t i = 0; i < p.blocks.size(); ++i) {
    const Block& b = p.blocks[i];
    if (b.filling || b.bytes < bytes || !drained(b)) continue;
    if (best < 0 || b.bytes < p.blocks[static_cast<size_t>(best)].bytes) best = static_cast<int>(i);
  }
  if (best >= 0) {
    p.blocks[static_cast<size_t>(best)].filling = true;
    return best;
  }
  const size_t size = std::bit_ceil(std::max(bytes, kSmallestBlock));
  // Room for a new block: drop idle ones, smallest first (they are what a
  // change of batch shape leaves behind). cudaFreeHost synchronises the
  // device, so this is kept to the rare copy that finds the pool full.
  while (p.bytes + size > kMaxStagingPerDevice) {
    int victim = -1;
    for (size_t i = 0; i < p.blocks.size(); ++i) {
      const Block& b = p.blocks[i];
      if (b.filling || !drained(b)) continue;
      if (victim < 0 || b.bytes < p.blocks[static_cast<size_t>(victim)].bytes)
        victim = static_cast<int>(i);
    }
    if (victim < 0) return -1;
    free_block(p, static_cast<size_t>(victim));
  }
  Block b{.bytes = size, .filling = true};
  const cudaError_t status = cudaHostAlloc(&b.host, size, cudaHostAllocPortable);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return -1;  // the host cannot lock more memory: copy directly
  }
  check(status, "cudaHostAlloc");
  const cudaError_t event = cudaEventCreateWithFlags(&b.drained, cudaEventDisableTiming);
  if (event != cudaSuccess) {
    cudaFreeHost(b.host);
    check(event, "cudaEventCreate");
  }
  p.blocks.push_back(b);
  p.bytes += size;
  total_bytes += size;
  return static_cast<int>(p.blocks.size() - 1);
}

}  // namespace

bool copy_to_device_staged(void* dst, Device device, const void* src, size_t bytes) {
  if (bytes > kMaxStagedCopy) return false;
  DeviceGuard guard(device);
  const cudaStream_t s = stream(device);
  Pool& p = pool(device);
  Block b;
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    const int i = take_block(p, bytes);
    if (i < 0) return false;
    b = p.blocks[static_cast<size_t>(i)];
  }
  // Blocks are only freed when idle, so this one stays while it is filling.
  const auto release = [&] {
    std::lock_guard<std::mutex> lock(p.mutex);
    for (Block& x : p.blocks)
      if (x.host == b.host) x.filling = false;
  };
  std::memcpy(b.host, src, bytes);
  const cudaError_t queued = cudaMemcpyAsync(dst, b.host, bytes, cudaMemcpyHostToDevice, s);
  if (queued != cudaSuccess) {
    release();
    check(queued, "cudaMemcpyAsync");
  }
  // A DMA is queued from the block: without its event the block is never
  // known to be drained, so it stays marked as filling (lost to the pool)
  // rather than be refilled under the DMA.
  check(cudaEventRecord(b.drained, s), "cudaEventRecord");
  release();
  return true;
}

size_t staging_bytes() {
  return total_bytes.load();
}

}  // namespace tandem::cuda
