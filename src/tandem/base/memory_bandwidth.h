#pragma once
// Measures the machine's memory bandwidth (bytes read plus bytes written per
// second, all threads), including the access pattern of an in-place
// two-buffer all-reduce (read two buffers, write both): the physical limit an
// all-reduce between replica threads is measured against.

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct MemoryBandwidthOptions {
  int64_t buffer_bytes = int64_t{256} << 20;  // per buffer; far beyond the caches
  int threads = 0;                            // 0: one per physical core
  int repeats = 5;                            // median of these
};

struct MemoryBandwidthResult {
  std::string kernel;          // read, write, copy, read2_write2
  int64_t bytes_per_pass = 0;  // read + written by one pass over the buffers
  double median_gbps = 0.0;    // 1e9 bytes per second
  double min_gbps = 0.0;
  double max_gbps = 0.0;
};

// Runs each kernel `repeats` times (interleaved). Throws InvalidArgument for
// non-positive sizes.
std::vector<MemoryBandwidthResult> measure_memory_bandwidth(
    const MemoryBandwidthOptions& options = {});

// The read2_write2 figure alone (bytes/s), for bounds of in-place all-reduces.
double all_reduce_pattern_bandwidth(const MemoryBandwidthOptions& options = {});

}  // namespace tandem
