#include "tandem/base/cpu_info.h"

#include <cpuid.h>
#include <hwloc.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

namespace tandem {
namespace {

struct CpuidBits {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

CpuidBits cpuid(unsigned leaf, unsigned subleaf) {
  CpuidBits r;
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

bool os_saves_avx512_state() {
  // XCR0 must enable opmask, ZMM_Hi256 and Hi16_ZMM (bits 5-7) besides SSE/AVX.
  const CpuidBits leaf1 = cpuid(1, 0);
  if (!(leaf1.ecx & (1u << 27))) return false;  // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0xE6u) == 0xE6u;
}

std::vector<std::string> detect_features() {
  std::vector<std::string> out;
  const unsigned max_leaf = __get_cpuid_max(0, nullptr);
  const CpuidBits l1 = cpuid(1, 0);
  if (l1.ecx & (1u << 12)) out.push_back("fma");
  if (l1.ecx & (1u << 29)) out.push_back("f16c");
  if (max_leaf < 7) return out;
  const CpuidBits l7 = cpuid(7, 0);
  const CpuidBits l7s1 = cpuid(7, 1);
  if (l7.ebx & (1u << 5)) out.push_back("avx2");
  if (os_saves_avx512_state()) {
    if (l7.ebx & (1u << 16)) out.push_back("avx512f");
    if (l7.ebx & (1u << 30)) out.push_back("avx512bw");
    if (l7.ebx & (1u << 31)) out.push_back("avx512vl");
    if (l7.ecx & (1u << 11)) out.push_back("avx512_vnni");
    if (l7s1.eax & (1u << 5)) out.push_back("avx512_bf16");
    if (l7.edx & (1u << 23)) out.push_back("avx512_fp16");
  }
  if (l7.edx & (1u << 24)) out.push_back("amx_tile");
  if (l7.edx & (1u << 22)) out.push_back("amx_bf16");
  if (l7.edx & (1u << 25)) out.push_back("amx_int8");
  return out;
}

std::string read_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(colon + 1);
        name.erase(0, name.find_first_not_of(" \t"));
        return name;
      }
    }
  }
  return "unknown";
}

void read_topology(CpuInfo& info) {
  hwloc_topology_t topology;
  if (hwloc_topology_init(&topology) != 0) return;
  if (hwloc_topology_load(topology) == 0) {
    info.physical_cores = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_CORE);
    info.logical_cpus = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PU);
    info.sockets = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PACKAGE);
    info.numa_nodes = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE);
    if (hwloc_obj_t l2 = hwloc_get_obj_by_type(topology, HWLOC_OBJ_L2CACHE, 0)) {
      info.l2_cache_bytes = static_cast<int64_t>(l2->attr->cache.size);
    }
    const int l3_count = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_L3CACHE);
    for (int i = 0; i < l3_count; ++i) {
      info.l3_cache_bytes += static_cast<int64_t>(
          hwloc_get_obj_by_type(topology, HWLOC_OBJ_L3CACHE, i)->attr->cache.size);
    }
  }
  hwloc_topology_destroy(topology);
}

CpuInfo detect() {
  CpuInfo info;
  info.model_name = read_model_name();
  read_topology(info);
  if (info.logical_cpus <= 0)
    info.logical_cpus = static_cast<int>(std::thread::hardware_concurrency());
  if (info.physical_cores <= 0) info.physical_cores = info.logical_cpus;
  info.memory_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  info.features = detect_features();
  return info;
}

}  // namespace

bool CpuInfo::has(const std::string& feature) const {
  return std::find(features.begin(), features.end(), feature) != features.end();
}

const CpuInfo& cpu_info() {
  static const CpuInfo info = detect();
  return info;
}

}  // namespace tandem
