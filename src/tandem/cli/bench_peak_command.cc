// `tandem bench peak`: the matmul rate of one device, the peak the monitor
// compares a model's achieved FLOP/s with.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/parse_number.h"
#include "tandem/cli/commands.h"
#include "tandem/kernels/flops.h"
#include "tandem/kernels/matmul.h"
#include "tandem/tensor/device.h"

namespace tandem::cli {
namespace {

struct PeakOptions {
  std::string device = "cpu";
  std::string dtypes = "f32,bf16";
  std::string threads;  // default: 1 and the physical core count
  int64_t size = 2048;
  int repeats = 5;
  bool json = false;
};

int run_bench_peak(const PeakOptions& o) {
  if (o.repeats < 1) TANDEM_THROW(InvalidArgument, "--repeats must be at least 1, got ", o.repeats);
  const Device device = parse_device(o.device);
  const bool gpu = device.kind != DeviceKind::cpu;
  if (gpu && !o.threads.empty()) {
    TANDEM_THROW(InvalidArgument, "--threads applies to CPU devices, not ", device.to_string());
  }
  std::vector<int> thread_counts;
  if (gpu) {
    thread_counts = {1};  // the host thread that queues the products
  } else if (o.threads.empty()) {
    thread_counts = {1};
    if (cpu_info().physical_cores > 1) thread_counts.push_back(cpu_info().physical_cores);
  } else {
    for (const std::string& t : split_list(o.threads)) {
      const std::optional<int64_t> n = parse_number<int64_t>(t);
      if (!n || *n < 1 || *n > 4096)
        TANDEM_THROW(InvalidArgument, "--threads entries must be integers from 1 to 4096, got '", t,
                     "'");
      thread_counts.push_back(static_cast<int>(*n));
    }
  }
  struct Variant {
    std::string name;  // f32, tf32 (f32 on TF32 Tensor Cores) or bf16
    DType dtype;
    int threads;
    std::vector<double> samples;
  };
  std::vector<Variant> variants;
  for (const std::string& d : split_list(o.dtypes)) {
    if (d == "tf32" && !gpu) {
      TANDEM_THROW(InvalidArgument, "--dtypes tf32 needs a CUDA --device (TF32 is a GPU format)");
    }
    const DType dtype = d == "tf32" ? DType::f32 : parse_dtype(d);
    for (int t : thread_counts) variants.push_back({d, dtype, t, {}});
  }
  const bool tf32_before = kernels::matmul_allow_tf32();
  for (int r = 0; r < o.repeats; ++r) {  // interleaved: noise hits every variant alike
    for (Variant& v : variants) {
      NumThreadsScope threads(v.threads);
      kernels::set_matmul_allow_tf32(v.name == "tf32");
      v.samples.push_back(kernels::measure_matmul_peak(v.dtype, o.size, 0.3, device));
    }
  }
  kernels::set_matmul_allow_tf32(tf32_before);
  nlohmann::json out = nlohmann::json::array();
  if (!o.json)
    fmt::print(
        "matmul {0}x{0}x{0} peak on {7}, {1} repeats (GFLOP/s)\n{2:<6} {3:>7} {4:>9} {5:>9} "
        "{6:>9}\n",
        o.size, o.repeats, "dtype", "threads", "median", "min", "max", device.to_string());
  for (Variant& v : variants) {
    std::sort(v.samples.begin(), v.samples.end());
    const double median = v.samples[v.samples.size() / 2];
    if (o.json) {
      out.push_back({{"dtype", v.name},
                     {"device", device.to_string()},
                     {"threads", v.threads},
                     {"size", o.size},
                     {"median_flops_per_second", median},
                     {"min_flops_per_second", v.samples.front()},
                     {"max_flops_per_second", v.samples.back()}});
    } else {
      fmt::print("{:<6} {:>7} {:>9.1f} {:>9.1f} {:>9.1f}\n", v.name, v.threads, median / 1e9,
                 v.samples.front() / 1e9, v.samples.back() / 1e9);
    }
  }
  if (o.json) fmt::print("{}\n", out.dump(2));
  return 0;
}

}  // namespace

Command add_bench_peak_command(CLI::App& bench) {
  CLI::App* c = bench.add_subcommand(
      "peak", "Peak matmul rate (f32, bf16) per thread count: the device peak the monitor uses");
  auto o = std::make_shared<PeakOptions>();
  c->add_option("--device", o->device, "cpu, or cuda:N for a GPU")->capture_default_str();
  c->add_option("--dtypes", o->dtypes,
                "Comma-separated: f32, bf16, and on a GPU tf32 (f32 on TF32 Tensor Cores; plain "
                "f32 is measured with TF32 off)")
      ->capture_default_str();
  c->add_option("--threads", o->threads,
                "Comma-separated thread counts (default: 1 and the physical core count)");
  c->add_option("--size", o->size, "Matrix size N of the N x N x N product")->capture_default_str();
  c->add_option("--repeats", o->repeats, "Samples per variant")->capture_default_str();
  c->add_flag("--json", o->json, "Print as JSON");
  return {c, [o]() { return run_bench_peak(*o); }};
}

}  // namespace tandem::cli
