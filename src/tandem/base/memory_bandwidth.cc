#include "tandem/base/memory_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/base/statistics.h"
#include "tandem/base/target_clones.h"

namespace tandem {
namespace {

TANDEM_TARGET_CLONES float read_kernel(const float* a, int64_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i];
    s1 += a[i + 1];
    s2 += a[i + 2];
    s3 += a[i + 3];
  }
  for (; i < n; ++i) s0 += a[i];
  return s0 + s1 + s2 + s3;
}
TANDEM_TARGET_CLONES void write_kernel(float* a, int64_t n, float v) {
  for (int64_t i = 0; i < n; ++i) a[i] = v;
}
TANDEM_TARGET_CLONES void copy_kernel(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}
// The in-place two-rank all-reduce: a[i] = b[i] = a[i] + b[i].
TANDEM_TARGET_CLONES void read2_write2_kernel(float* a, float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float s = a[i] + b[i];
    a[i] = s;
    b[i] = s;
  }
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

}  // namespace

std::vector<MemoryBandwidthResult> measure_memory_bandwidth(const MemoryBandwidthOptions& options) {
  if (options.buffer_bytes < 4096 || options.repeats < 1 || options.threads < 0) {
    TANDEM_THROW(InvalidArgument,
                 "memory bandwidth: buffers must be at least 4 KiB, repeats positive and threads "
                 "0 (one per core) or more, got ",
                 options.buffer_bytes, " bytes, ", options.repeats, " repeats and ",
                 options.threads, " threads");
  }
  const int threads =
      options.threads > 0 ? options.threads : std::max(1, cpu_info().physical_cores);
  const int64_t n = options.buffer_bytes / 4;
  std::unique_ptr<float, FreeDeleter> a(
      static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(n) * 4)));
  std::unique_ptr<float, FreeDeleter> b(
      static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(n) * 4)));
  if (!a || !b)
    TANDEM_THROW(Error, "memory bandwidth: cannot allocate 2 x ", options.buffer_bytes, " bytes");
  // Each thread touches its own part of both buffers first, so the pages
  // are its own (on its NUMA node).
  const std::string names[4] = {"read", "write", "copy", "read2_write2"};
  const int64_t bytes[4] = {4 * n, 4 * n, 8 * n, 16 * n};
  std::vector<double> seconds[4];
  std::atomic<float> sink{0.0f};
  auto run_kernel = [&](int kernel) {
    std::vector<std::thread> pool;
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const int64_t begin = n * t / threads, end = n * (t + 1) / threads, len = end - begin;
        float* pa = a.get() + begin;
        float* pb = b.get() + begin;
        switch (kernel) {
          case 0:
            sink = sink + read_kernel(pa, len);
            break;
          case 1:
            write_kernel(pa, len, 1.0f);
            break;
          case 2:
            copy_kernel(pb, pa, len);
            break;
          case 3:
            read2_write2_kernel(pa, pb, len);
            break;
          default:  // first touch
            write_kernel(pa, len, 1.0f);
            write_kernel(pb, len, 0.0f);
            break;
        }
      });
    }
    for (auto& th : pool) th.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  run_kernel(4);
  for (int r = 0; r < options.repeats; ++r) {
    for (int k = 0; k < 4; ++k) seconds[k].push_back(run_kernel(k));
  }
  std::vector<MemoryBandwidthResult> results;
  for (int k = 0; k < 4; ++k) {
    std::vector<double> gbps;
    for (double s : seconds[k]) gbps.push_back(static_cast<double>(bytes[k]) / s / 1e9);
    results.push_back({names[k], bytes[k], median(gbps),
                       *std::min_element(gbps.begin(), gbps.end()),
                       *std::max_element(gbps.begin(), gbps.end())});
  }
  return results;
}

double all_reduce_pattern_bandwidth(const MemoryBandwidthOptions& options) {
  return measure_memory_bandwidth(options).back().median_gbps * 1e9;
}

}  // namespace tandem
