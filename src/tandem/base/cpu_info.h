#pragma once
// What the host CPU is and can do: model, core counts, caches, memory and the
// instruction-set features that matter for tandem's kernels (AVX-512, bf16, AMX).

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct CpuInfo {
  std::string model_name;
  int logical_cpus = 0;
  int physical_cores = 0;
  int sockets = 0;
  int numa_nodes = 0;
  int64_t l2_cache_bytes = 0;  // per core
  int64_t l3_cache_bytes = 0;  // total
  int64_t memory_bytes = 0;    // physical RAM
  // ISA feature names as /proc/cpuinfo spells them, only those present
  // among the ones tandem cares about (avx2, fma, f16c, avx512f, ...).
  std::vector<std::string> features;

  bool has(const std::string& feature) const;
};

// Reads the host's CPU description (hwloc for topology, cpuid for features).
// Thread-safe; computed once.
const CpuInfo& cpu_info();

}  // namespace tandem
