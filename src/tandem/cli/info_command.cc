// `tandem info`: the machine as tandem sees it.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "tandem/base/cpu_info.h"
#include "tandem/cli/commands.h"
#include "tandem/comm/nccl.h"
#include "tandem/config.h"
#include "tandem/kernels/backend_info.h"
#include "tandem/tensor/device.h"

namespace tandem::cli {

Command add_info_command(CLI::App& app) {
  CLI::App* command =
      app.add_subcommand("info", "Show the CPU, its ISA features, memory, oneDNN and devices");
  auto json = std::make_shared<bool>(false);
  command->add_flag("--json", *json, "Print as JSON");
  return {command, [json]() {
            const CpuInfo& cpu = cpu_info();
            const kernels::BackendInfo backend = kernels::backend_info();
            const bool has_amx = cpu.has("amx_bf16");
            const bool has_bf16 = has_amx || cpu.has("avx512_bf16");
            if (*json) {
              nlohmann::json j = {{"tandem_version", TANDEM_VERSION_STRING},
                                  {"cpu_model", cpu.model_name},
                                  {"logical_cpus", cpu.logical_cpus},
                                  {"physical_cores", cpu.physical_cores},
                                  {"sockets", cpu.sockets},
                                  {"numa_nodes", cpu.numa_nodes},
                                  {"l2_cache_bytes", cpu.l2_cache_bytes},
                                  {"l3_cache_bytes", cpu.l3_cache_bytes},
                                  {"memory_bytes", cpu.memory_bytes},
                                  {"isa_features", cpu.features},
                                  {"bf16_matrix_unit", has_amx    ? "amx"
                                                       : has_bf16 ? "avx512_bf16"
                                                                  : "none"},
                                  {"bf16_compute", has_amx                   ? "amx"
                                                   : has_bf16                ? "avx512_bf16"
                                                   : backend.bf16_primitives ? "avx512_emulated"
                                                                             : "f32_widened"},
                                  {"onednn_version", backend.onednn_version},
                                  {"onednn_isa", backend.cpu_isa},
                                  {"virtual_cpu_devices", virtual_cpu_device_count()},
                                  {"cuda", cuda_built()}};
              if (backend.cuda_built) {
                nlohmann::json gpus = nlohmann::json::array();
                for (const auto& g : backend.gpus) {
                  gpus.push_back({{"name", g.name},
                                  {"memory_bytes", g.memory_bytes},
                                  {"compute_capability",
                                   fmt::format("{}.{}", g.compute_major, g.compute_minor)},
                                  {"multiprocessors", g.multiprocessors}});
                }
                j["gpus"] = gpus;
                j["cuda_runtime_version"] = backend.cuda_runtime_version;
                j["cuda_driver_version"] = backend.cuda_driver_version;
                j["cublas_version"] = backend.cublas_version;
                j["cudnn_version"] = backend.cudnn_version;
                j["nccl_version"] = comm::nccl_version();
              }
              fmt::print("{}\n", j.dump(2));
              return 0;
            }
            std::string features;
            for (const auto& f : cpu.features) features += (features.empty() ? "" : " ") + f;
            fmt::print("tandem {}\n", TANDEM_VERSION_STRING);
            fmt::print("cpu            {}\n", cpu.model_name);
            fmt::print("cores          {} physical, {} logical, {} socket(s), {} NUMA node(s)\n",
                       cpu.physical_cores, cpu.logical_cpus, cpu.sockets, cpu.numa_nodes);
            fmt::print("caches         L2 {} KiB per core, L3 {} MiB\n", cpu.l2_cache_bytes >> 10,
                       cpu.l3_cache_bytes >> 20);
            fmt::print("memory         {:.1f} GiB\n",
                       static_cast<double>(cpu.memory_bytes) / (1 << 30));
            fmt::print("isa features   {}\n", features.empty() ? "(none of interest)" : features);
            fmt::print("bf16 matmul    {}\n", has_amx    ? "AMX tiles"
                                              : has_bf16 ? "AVX512-BF16 (no AMX)"
                                              : backend.bf16_primitives
                                                  ? "emulated on AVX-512 (no bf16 instructions)"
                                                  : "computed in f32 on the widened bf16 values "
                                                    "(oneDNN has no bf16 kernels without AVX-512)");
            fmt::print("oneDNN         {} (dispatching to {})\n", backend.onednn_version,
                       backend.cpu_isa);
            fmt::print("devices        {} virtual CPU device(s) (one per physical core)\n",
                       virtual_cpu_device_count());
            if (!backend.cuda_built) {
              fmt::print("cuda           not built (no CUDA toolkit when configured)\n");
              return 0;
            }
            fmt::print("cuda           runtime {}, driver {}, cuBLASLt {}, cuDNN {}, NCCL {}\n",
                       backend.cuda_runtime_version, backend.cuda_driver_version,
                       backend.cublas_version, backend.cudnn_version, comm::nccl_version());
            if (backend.gpus.empty()) fmt::print("gpus           none found\n");
            for (size_t i = 0; i < backend.gpus.size(); ++i) {
              const auto& g = backend.gpus[i];
              fmt::print("gpu            cuda:{} {}, {:.1f} GiB, compute {}.{}, {} SMs\n", i,
                         g.name, static_cast<double>(g.memory_bytes) / (1 << 30), g.compute_major,
                         g.compute_minor, g.multiprocessors);
            }
            return 0;
          }};
}

}  // namespace tandem::cli
