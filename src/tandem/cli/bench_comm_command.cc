// `tandem bench memory` and `tandem bench allreduce|reducescatter|allgather`:
// the machine's memory bandwidth, and collectives in the convention of
// nccl-tests (algbw = bytes / time; all-reduce busbw = algbw x 2(n-1)/n,
// reduce-scatter and all-gather busbw = algbw x (n-1)/n, bytes being the
// full buffer), each size's result checked against a naive reduction. For
// in-place all-reduce the table also gives the fraction of the memory-traffic
// bound: n buffers of S bytes must be read and written once, so no all-reduce
// takes less than 2 n S / B, B being the read2_write2 bandwidth. Each size
// also gives the CPU time a rank's process spends per call (user and
// system: MPI's polling and the kernel's TCP copies); with --busy-threads,
// its time beside computing threads and their speed meanwhile, the scaling
// planner's model of overlap; and all-reduce with --wire bf16|f16 times the
// compressed all-reduce that training's --wire runs, conversions included.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include <sys/resource.h>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/base/memory_bandwidth.h"
#include "tandem/base/parallel.h"
#include "tandem/base/statistics.h"
#include "tandem/cli/busy_work.h"
#include "tandem/cli/commands.h"
#include "tandem/cli/memory_plan_output.h"
#include "tandem/comm/compression.h"
#include "tandem/comm/hierarchical.h"
#include "tandem/comm/inprocess.h"
#include "tandem/comm/launch.h"

namespace tandem::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct MemoryOptions {
  int64_t buffer_mib = 256;
  int threads = 0;
  int repeats = 5;
  bool json = false;
};

int run_bench_memory(const MemoryOptions& o) {
  // Flags named, and MiB checked before the shift (2^44 MiB wrapped to 256).
  if (o.buffer_mib < 1 || o.buffer_mib > (int64_t{1} << 20) || o.repeats < 1 || o.threads < 0) {
    TANDEM_THROW(InvalidArgument,
                 "--buffer-mib must be in [1, 1048576], --repeats at least 1 and --threads 0 "
                 "(one per core) or more, got ",
                 o.buffer_mib, ", ", o.repeats, " and ", o.threads);
  }
  const auto results = measure_memory_bandwidth(
      {.buffer_bytes = o.buffer_mib << 20, .threads = o.threads, .repeats = o.repeats});
  const int threads = o.threads > 0 ? o.threads : std::max(1, cpu_info().physical_cores);
  if (o.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : results) {
      rows.push_back({{"kernel", r.kernel},
                      {"bytes_per_pass", r.bytes_per_pass},
                      {"gbps_median", r.median_gbps},
                      {"gbps_min", r.min_gbps},
                      {"gbps_max", r.max_gbps}});
    }
    fmt::print("{}\n", nlohmann::json{{"bench", "memory"},
                                      {"threads", threads},
                                      {"buffer_mib", o.buffer_mib},
                                      {"repeats", o.repeats},
                                      {"results", rows}}
                           .dump(2));
    return 0;
  }
  fmt::print(
      "memory bandwidth: {} thread(s), buffers of {} MiB, median of {} (bytes read + written per "
      "s)\n",
      threads, o.buffer_mib, o.repeats);
  fmt::print("{:<14} {:>12} {:>10} {:>10}\n", "kernel", "GB/s", "min", "max");
  for (const auto& r : results) {
    fmt::print("{:<14} {:>12.2f} {:>10.2f} {:>10.2f}\n", r.kernel, r.median_gbps, r.min_gbps,
               r.max_gbps);
  }
  return 0;
}

struct CollectiveOptions {
  std::string backend = "inprocess";
  int ranks = 2;         // in-process ranks (threads); per process for hierarchical
  int threads = 1;       // intra-op threads of each rank (the wire's conversions, reductions)
  int busy_threads = 0;  // > 0: also time each size while that many threads compute per rank
  std::string dtype = "f32";
  std::string wire = "f32";  // all-reduce: the f32 buffer travels as this dtype
  std::string op = "sum";
  std::string min_bytes = "4";
  std::string max_bytes = "256M";
  int factor = 4;
  bool out_of_place = false;
  double bound_gbps = 0;  // 0: measure the read2_write2 bandwidth first
  int repeats = 5;
  int64_t small_message_bytes = comm::InProcessOptions{}.small_message_bytes;
  bool json = false;
};

struct SizeResult {
  int64_t bytes = 0, count = 0, iterations = 0;
  double seconds = 0;  // median time of one collective
  double seconds_min = 0, seconds_max = 0;
  double cpu_seconds = 0;  // CPU time of one rank per collective, mean over ranks
  // With busy threads: the collective's mean time while they compute, and
  // their mean speed meanwhile as a fraction of their speed alone (and over ranks).
  double busy_seconds = 0, busy_compute_rate = 0;
  bool correct = true;
};

// Rank r's known input: element i = (i % 13) + r, exact in every dtype.
float input_value(int rank, int64_t i) {
  return static_cast<float>(i % 13 + rank);
}

// User and system time of this process so far.
double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

struct MeasureSetup {
  comm::Collective collective = comm::Collective::all_reduce;
  DType dtype = DType::f32;
  comm::WireDType wire = comm::WireDType::f32;
  comm::ReduceOp op = comm::ReduceOp::sum;
  bool in_place = true;
  int repeats = 5;
  int ranks_per_process = 1;  // threads that share the process's CPU time
  int busy_threads = 0;
};

// One number reduced across the ranks (every rank calls it).
double across_ranks(comm::Communicator& comm, double value, comm::ReduceOp op) {
  Tensor t = Tensor::full(Shape{1}, static_cast<float>(value));
  comm.all_reduce(t, t, op);
  return static_cast<double>(t.to_floats()[0]);
}

// The seconds of one call at the slowest rank's pace over three calls.
double slowest_call_seconds(comm::Communicator& comm, const std::function<void()>& once) {
  const auto start = Clock::now();
  for (int i = 0; i < 3; ++i) once();
  const double mine = std::chrono::duration<double>(Clock::now() - start).count() / 3;
  return std::max(1e-7, across_ranks(comm, mine, comm::ReduceOp::max));
}

// Calls of `call_seconds` that fill about a quarter of a second (at least 3,
// at most `most`): over a link with milliseconds of delay, 20,000 4-byte
// calls would take minutes, and beside compute a call can take 50x as long.
int64_t quarter_second_of_calls(double call_seconds, int64_t most) {
  return std::clamp<int64_t>(static_cast<int64_t>(0.25 / call_seconds), 3, most);
}

// The collective's time while `setup.busy_threads` threads per rank compute,
// and their speed then as a fraction of `busy_alone`, into `s` (means over
// the samples: beside compute a call either shares the core or waits out
// the compute's time slice, and steps see the mix).
void time_beside_compute(comm::Communicator& comm, const MeasureSetup& setup,
                         const std::function<void()>& once, double busy_alone, SizeResult& s) {
  double three = 0.0;
  busy_work_per_second(setup.busy_threads, [&] { three = slowest_call_seconds(comm, once); });
  const int64_t calls = quarter_second_of_calls(three, s.iterations);
  double seconds = 0.0, rates = 0.0;
  for (int rep = 0; rep < setup.repeats; ++rep) {
    comm.barrier();
    const double work = busy_work_per_second(setup.busy_threads, [&] {
      const auto start = Clock::now();
      for (int64_t it = 0; it < calls; ++it) once();
      seconds +=
          std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(calls);
    });
    rates += work / busy_alone;
  }
  s.busy_seconds = seconds / setup.repeats;
  s.busy_compute_rate = across_ranks(comm, rates / setup.repeats, comm::ReduceOp::mean);
}

// Runs the collective at every size on communicator `comm`; every rank calls
// this with the same arguments. Rank 0's timings are returned.
// Whether one call's output on rank r of n equals the closed form of the
// collective over input_value (to the precision of its dtype and wire).
bool matches_closed_form(const MeasureSetup& setup, int n, int r, int64_t per_rank,
                         const std::vector<float>& out) {
  const comm::Collective collective = setup.collective;
  const comm::ReduceOp op = setup.op;
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
    double expected = 0;
    if (collective == comm::Collective::all_gather) {
      expected = input_value(static_cast<int>(i / per_rank), i % per_rank);
    } else {
      const int64_t index = collective == comm::Collective::reduce_scatter ? r * per_rank + i : i;
      for (int j = 0; j < n; ++j) {
        const double v = input_value(j, index);
        expected = j == 0                      ? v
                   : op == comm::ReduceOp::max ? std::max(expected, v)
                   : op == comm::ReduceOp::min ? std::min(expected, v)
                                               : expected + v;
      }
      if (op == comm::ReduceOp::mean) expected /= n;
    }
    const double tolerance = (setup.dtype == DType::f32 || setup.dtype == DType::i32) &&
                                     setup.wire == comm::WireDType::f32
                                 ? 1e-5 * std::abs(expected)
                                 : std::abs(expected) / 100 * n;
    if (std::abs(out[i] - expected) > tolerance + 1e-6) return false;
  }
  return true;
}

std::vector<SizeResult> measure(comm::Communicator& comm, const MeasureSetup& setup,
                                const std::vector<int64_t>& sizes) {
  const comm::Collective collective = setup.collective;
  const DType dtype = setup.dtype;
  const comm::ReduceOp op = setup.op;
  const bool in_place = setup.in_place;
  const int n = comm.size(), r = comm.rank();
  const int64_t element = static_cast<int64_t>(dtype_size(dtype));
  // The busy threads' speed with every rank's running and no collective.
  double busy_alone = 0.0;
  if (setup.busy_threads > 0) {
    comm.barrier();
    busy_alone = busy_work_per_second(
        setup.busy_threads, [] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });
  }
  std::vector<SizeResult> results;
  for (int64_t bytes : sizes) {
    SizeResult s;
    // nccl-tests' convention: the size is the full buffer (all-gather output,
    // reduce-scatter input).
    s.count = std::max<int64_t>(1, bytes / element);
    if (collective != comm::Collective::all_reduce) s.count = std::max<int64_t>(n, s.count / n * n);
    s.bytes = s.count * element;
    const int64_t per_rank = collective == comm::Collective::all_reduce ? s.count : s.count / n;
    Tensor big = Tensor::empty(Shape{s.count}, dtype, cpu_device(), MemoryCategory::communication);
    Tensor small =
        collective == comm::Collective::all_reduce
            ? (in_place ? big
                        : Tensor::empty(Shape{s.count}, dtype, cpu_device(),
                                        MemoryCategory::communication))
            : Tensor::empty(Shape{per_rank}, dtype, cpu_device(), MemoryCategory::communication);
    auto fill = [&] {
      std::vector<float> values(
          static_cast<size_t>(collective == comm::Collective::all_gather ? per_rank : s.count));
      for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i)
        values[i] = input_value(r, i);
      (collective == comm::Collective::all_gather ? small : big)
          .copy_from(Tensor::from_floats(Shape{static_cast<int64_t>(values.size())}, values));
    };
    const Tensor staging =
        setup.wire == comm::WireDType::f32
            ? Tensor()
            : Tensor::empty(Shape{s.count},
                            setup.wire == comm::WireDType::bf16 ? DType::bf16 : DType::f16,
                            cpu_device(), MemoryCategory::communication);
    const std::function<void()> once = [&] {
      switch (collective) {
        case comm::Collective::all_reduce:
          if (staging.defined())
            comm::all_reduce_compressed(comm, big, op, setup.wire, staging);
          else
            comm.all_reduce(big, small, op);
          break;
        case comm::Collective::reduce_scatter:
          comm.reduce_scatter(big, small, op);
          break;
        default:
          comm.all_gather(small, big);
          break;
      }
    };
    fill();
    once();  // warm-up: page faults, caches
    // About 64 MiB through each sample, and at most a quarter of a second.
    s.iterations = quarter_second_of_calls(
        slowest_call_seconds(comm, once),
        std::clamp<int64_t>((int64_t{64} << 20) / std::max<int64_t>(s.bytes, 1), 3, 20000));
    std::vector<double> samples;
    const double cpu_start = process_cpu_seconds();
    for (int rep = 0; rep < setup.repeats; ++rep) {
      comm.barrier();
      const auto start = Clock::now();
      for (int64_t it = 0; it < s.iterations; ++it) once();
      comm.barrier();
      samples.push_back(std::chrono::duration<double>(Clock::now() - start).count() / s.iterations);
    }
    s.cpu_seconds = across_ranks(comm,
                                 (process_cpu_seconds() - cpu_start) / setup.ranks_per_process /
                                     static_cast<double>(setup.repeats * s.iterations),
                                 comm::ReduceOp::mean);
    s.seconds = median(samples);
    s.seconds_min = *std::min_element(samples.begin(), samples.end());
    s.seconds_max = *std::max_element(samples.begin(), samples.end());
    if (setup.busy_threads > 0) time_beside_compute(comm, setup, once, busy_alone, s);
    // Check one fresh call against the closed form.
    fill();
    once();
    const std::vector<float> out = (collective == comm::Collective::reduce_scatter ? small
                                    : collective == comm::Collective::all_reduce   ? small
                                                                                   : big)
                                       .to_floats();
    s.correct = matches_closed_form(setup, n, r, per_rank, out);
    results.push_back(s);
  }
  return results;
}

// The options checked, and what measure() needs of them; `sizes` gets the
// message sizes, --min-bytes to --max-bytes by --factor.
MeasureSetup collective_setup(const CollectiveOptions& o, comm::Collective collective,
                              std::vector<int64_t>& sizes) {
  const DType dtype = parse_dtype(o.dtype);
  const comm::ReduceOp op = comm::parse_reduce_op(o.op);
  const int64_t lo = parse_bytes("--min-bytes", o.min_bytes),
                hi = parse_bytes("--max-bytes", o.max_bytes);
  if (lo < 1 || hi < lo) TANDEM_THROW(InvalidArgument, "need 1 <= --min-bytes <= --max-bytes");
  if (o.factor < 2) TANDEM_THROW(InvalidArgument, "--factor must be at least 2, got ", o.factor);
  if (!(o.bound_gbps >= 0.0) || !std::isfinite(o.bound_gbps)) {
    TANDEM_THROW(InvalidArgument, "--bound-gbps must be a bandwidth in GB/s (0: measure it), got ",
                 o.bound_gbps);
  }
  if (o.ranks < 1) TANDEM_THROW(InvalidArgument, "--ranks must be at least 1, got ", o.ranks);
  if (o.repeats < 1) TANDEM_THROW(InvalidArgument, "--repeats must be at least 1, got ", o.repeats);
  if (o.threads < 1 || o.threads > 1024)
    TANDEM_THROW(InvalidArgument, "--threads must be 1 to 1024, got ", o.threads);
  if (o.busy_threads < 0 || o.busy_threads > 1024)
    TANDEM_THROW(InvalidArgument, "--busy-threads must be 0 to 1024, got ", o.busy_threads);
  sizes.clear();
  for (int64_t b = lo; b <= hi; b *= o.factor) {
    sizes.push_back(b);
    if (b > hi / o.factor) break;  // the next would pass hi (or wrap)
  }
  const bool in_place = !o.out_of_place && collective == comm::Collective::all_reduce;
  const comm::WireDType wire = comm::parse_wire_dtype(o.wire);
  if (wire != comm::WireDType::f32) {
    if (dtype != DType::f32)
      TANDEM_THROW(InvalidArgument, "--wire compresses an f32 buffer; --dtype is ", o.dtype);
    if (op != comm::ReduceOp::sum && op != comm::ReduceOp::mean)
      TANDEM_THROW(InvalidArgument, "--wire supports --op sum and mean, got ", o.op);
    if (!in_place) TANDEM_THROW(InvalidArgument, "--wire reduces in place; drop --out-of-place");
  }
  return MeasureSetup{.collective = collective,
                      .dtype = dtype,
                      .wire = wire,
                      .op = op,
                      .in_place = in_place,
                      .repeats = o.repeats,
                      .ranks_per_process = o.backend == "mpi" || o.backend == "gloo" ? 1 : o.ranks,
                      .busy_threads = o.busy_threads};
}

// What the ranks measured: rank 0's results, the group's size, and whether
// this process prints them (rank 0's).
struct Measured {
  std::vector<SizeResult> results;
  int world = 1;
  bool print = true;
};

// measure() on `ranks` threads, each with communicator(rank); rank 0's
// results. A rank's error is rethrown here once every thread has ended.
template <typename MakeCommunicator>
std::vector<SizeResult> measure_on_threads(int ranks, int threads_per_rank,
                                           const MeasureSetup& setup,
                                           const std::vector<int64_t>& sizes,
                                           MakeCommunicator communicator) {
  std::vector<SizeResult> results;
  std::vector<std::thread> threads;
  std::exception_ptr error;
  std::mutex error_mutex;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        set_num_threads(threads_per_rank);
        auto c = communicator(r);
        auto mine = measure(*c, setup, sizes);
        if (r == 0) results = std::move(mine);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  return results;
}

Measured measure_backend(const CollectiveOptions& o, const MeasureSetup& setup,
                         const std::vector<int64_t>& sizes) {
  const comm::CommOptions comm_options{.verify_calls = false};
  Measured m;
  // Under a launcher each process would run the in-process benchmark of its
  // own, the tables interleaved.
  if (o.backend == "inprocess" && comm::launched_process_count() > 1) {
    TANDEM_THROW(InvalidArgument, "--backend inprocess runs in one process, but ",
                 comm::launcher_name(comm::launcher()), " started several: give --backend ",
                 comm::launcher() == comm::Launcher::mpi ? "mpi" : "gloo", " (or hierarchical)");
  }
  if (o.backend == "inprocess") {
    comm::InProcessGroup group(
        o.ranks, {.comm = comm_options, .small_message_bytes = o.small_message_bytes});
    m.world = o.ranks;
    m.results = measure_on_threads(o.ranks, o.threads, setup, sizes,
                                   [&](int r) { return group.communicator(r); });
  } else if (o.backend == "mpi" || o.backend == "gloo") {
    if ((o.backend == "gloo") != (comm::launcher() == comm::Launcher::tandem)) {
      TANDEM_THROW(InvalidArgument, "--backend ", o.backend, " runs under ",
                   o.backend == "gloo" ? "tandem launch" : "mpirun", ", not ",
                   comm::launcher() == comm::Launcher::none
                       ? std::string("without a launcher")
                       : "under " + std::string(comm::launcher_name(comm::launcher())));
    }
    // Not OpenMP's default team: ranks that share a host's cores (or test
    // hosts that share a machine's) would spin against each other.
    set_num_threads(o.threads);
    auto c = comm::make_process_communicator(comm_options);
    m.world = c->size();
    m.print = c->rank() == 0;
    m.results = measure(*c, setup, sizes);
  } else if (o.backend == "hierarchical") {
    comm::HierarchicalGroup group(o.ranks, comm_options);
    m.world = group.process_count() * o.ranks;
    m.print = group.process_rank() == 0;
    m.results = measure_on_threads(o.ranks, o.threads, setup, sizes,
                                   [&](int r) { return group.communicator(r); });
  } else {
    TANDEM_THROW(InvalidArgument, "--backend: unknown backend '", o.backend,
                 "' (expected inprocess, mpi, gloo or hierarchical)");
  }
  return m;
}

// The table (or --json) of rank 0's results; Error when a check failed.
void report_collective(const CollectiveOptions& o, comm::Collective collective,
                       const MeasureSetup& setup, const Measured& measured) {
  const int world = measured.world;
  const bool in_place = setup.in_place;
  const comm::WireDType wire = setup.wire;
  // The bound applies to in-place all-reduce, whose traffic is 2 n S.
  double bound = o.bound_gbps * 1e9;
  const bool with_bound =
      collective == comm::Collective::all_reduce && in_place && o.backend == "inprocess";
  if (with_bound && bound <= 0) bound = all_reduce_pattern_bandwidth({.repeats = 3});
  const double bus_factor = collective == comm::Collective::all_reduce
                                ? 2.0 * (world - 1) / world
                                : static_cast<double>(world - 1) / world;
  const std::string name(comm::collective_name(collective));
  bool all_correct = true;
  nlohmann::json rows = nlohmann::json::array();
  if (!o.json) {
    fmt::print("{} {}{} {}{}, {} rank(s), backend {}, {} (median of {})\n", name, o.dtype,
               wire == comm::WireDType::f32 ? "" : " as " + o.wire + " on the wire",
               collective == comm::Collective::all_gather ? "" : o.op + " ",
               in_place ? "in place" : "out of place", world, o.backend,
               o.backend == "inprocess" ? "ranks are threads" : "ranks are processes", o.repeats);
    if (with_bound)
      fmt::print("memory-traffic bound: read2_write2 bandwidth {:.2f} GB/s\n", bound / 1e9);
    if (o.busy_threads > 0) {
      fmt::print(
          "with {} busy thread(s) per rank: the time while they compute, and their speed "
          "then (% of their speed alone)\n",
          o.busy_threads);
    }
    fmt::print("{:>12} {:>11} {:>11} {:>11} {:>11} {:>11} {:>8} {:>6}{}\n", "bytes", "time(us)",
               "cpu(us)", "algbw(GB/s)", "busbw(GB/s)", "spread(%)", with_bound ? "bound(%)" : "",
               "check", o.busy_threads > 0 ? "  busy time(us)  compute(%)" : "");
  }
  for (const SizeResult& s : measured.results) {
    all_correct = all_correct && s.correct;
    const double algbw = static_cast<double>(s.bytes) / s.seconds / 1e9;
    const double busbw = algbw * bus_factor;
    const double fraction = with_bound ? (2.0 * world * s.bytes / bound) / s.seconds : 0;
    const double spread = 100.0 * (s.seconds_max - s.seconds_min) / s.seconds;
    if (o.json) {
      nlohmann::json row = {{"bytes", s.bytes},
                            {"count", s.count},
                            {"time_us", s.seconds * 1e6},
                            {"time_us_min", s.seconds_min * 1e6},
                            {"time_us_max", s.seconds_max * 1e6},
                            {"cpu_us", s.cpu_seconds * 1e6},
                            {"algbw_gbps", algbw},
                            {"busbw_gbps", busbw},
                            {"iterations", s.iterations},
                            {"correct", s.correct}};
      if (with_bound) row["bound_fraction"] = fraction;
      if (o.busy_threads > 0) {
        row["busy_time_us"] = s.busy_seconds * 1e6;
        row["busy_compute_rate"] = s.busy_compute_rate;
      }
      rows.push_back(row);
    } else {
      fmt::print("{:>12} {:>11.2f} {:>11.2f} {:>11.3f} {:>11.3f} {:>11.1f} {:>8} {:>6}{}\n",
                 s.bytes, s.seconds * 1e6, s.cpu_seconds * 1e6, algbw, busbw, spread,
                 with_bound ? fmt::format("{:.1f}", 100 * fraction) : "",
                 s.correct ? "ok" : "WRONG",
                 o.busy_threads > 0 ? fmt::format(" {:>13.2f} {:>13.1f}", s.busy_seconds * 1e6,
                                                  100.0 * s.busy_compute_rate)
                                    : "");
    }
  }
  if (o.json) {
    nlohmann::json out = {{"bench", name},        {"backend", o.backend},
                          {"ranks", world},       {"dtype", o.dtype},
                          {"wire", o.wire},       {"op", o.op},
                          {"in_place", in_place}, {"busy_threads", o.busy_threads},
                          {"repeats", o.repeats}, {"results", rows}};
    if (with_bound) out["bound_gbps"] = bound / 1e9;
    fmt::print("{}\n", out.dump(2));
  }
  if (!all_correct) TANDEM_THROW(Error, name, " returned wrong results (see the check column)");
}

int run_bench_collective(const CollectiveOptions& o, comm::Collective collective) {
  std::vector<int64_t> sizes;
  const MeasureSetup setup = collective_setup(o, collective, sizes);
  const Measured measured = measure_backend(o, setup, sizes);
  if (measured.print) report_collective(o, collective, setup, measured);
  return 0;
}

}  // namespace

std::vector<Command> add_bench_comm_commands(CLI::App& bench) {
  std::vector<Command> commands;
  CLI::App* memory =
      bench.add_subcommand("memory", "Memory bandwidth (read, write, copy, all-reduce pattern)");
  auto mo = std::make_shared<MemoryOptions>();
  memory->add_option("--buffer-mib", mo->buffer_mib, "Size of each buffer in MiB")
      ->capture_default_str();
  memory->add_option("--threads", mo->threads, "Threads (default: one per physical core)");
  memory->add_option("--repeats", mo->repeats, "Samples per kernel")->capture_default_str();
  memory->add_flag("--json", mo->json, "Print the table as JSON");
  commands.push_back({memory, [mo] { return run_bench_memory(*mo); }});

  const std::pair<const char*, comm::Collective> kinds[] = {
      {"allreduce", comm::Collective::all_reduce},
      {"reducescatter", comm::Collective::reduce_scatter},
      {"allgather", comm::Collective::all_gather}};
  for (const auto& kind : kinds) {
    const auto& name = kind.first;
    const comm::Collective collective = kind.second;
    CLI::App* c = bench.add_subcommand(
        name, std::string("Time and bandwidth of ") + name + " per buffer size");
    auto o = std::make_shared<CollectiveOptions>();
    c->add_option("--backend", o->backend,
                  "inprocess (threads), mpi (processes under mpirun), gloo (processes under "
                  "tandem launch) or hierarchical (threads x processes, under either)")
        ->capture_default_str();
    c->add_option("--ranks", o->ranks, "In-process ranks (per process for hierarchical)")
        ->capture_default_str();
    c->add_option("--busy-threads", o->busy_threads,
                  "Also time each size while this many threads per rank compute, as "
                  "training's do (its --threads), and report their speed meanwhile "
                  "(tandem plan scaling's model of overlap)")
        ->capture_default_str();
    c->add_option("--threads", o->threads,
                  "Intra-op threads of each rank, as training's --threads (the wire's "
                  "conversions)")
        ->capture_default_str();
    c->add_option("--dtype", o->dtype, "f32, bf16, f16 or i32")->capture_default_str();
    if (collective == comm::Collective::all_reduce) {
      c->add_option("--wire", o->wire,
                    "f32, or bf16/f16: the f32 buffer travels compressed, as training's --wire")
          ->capture_default_str();
    }
    if (collective != comm::Collective::all_gather) {
      c->add_option("--op", o->op, "sum, mean, max or min")->capture_default_str();
    }
    c->add_option("--min-bytes", o->min_bytes, "Smallest buffer (B, K, M, G)")
        ->capture_default_str();
    c->add_option("--max-bytes", o->max_bytes, "Largest buffer")->capture_default_str();
    c->add_option("--factor", o->factor, "Size step factor")->capture_default_str();
    if (collective == comm::Collective::all_reduce) {
      c->add_flag("--out-of-place", o->out_of_place, "Separate input and output buffers");
      c->add_option("--bound-gbps", o->bound_gbps,
                    "Memory bandwidth for the bound column (default: measure)");
      c->add_option("--small-message-bytes", o->small_message_bytes,
                    "In-process: largest all-reduce on the one-barrier staged path")
          ->capture_default_str();
    }
    c->add_option("--repeats", o->repeats, "Samples per size")->capture_default_str();
    c->add_flag("--json", o->json, "Print the table as JSON");
    commands.push_back({c, [o, collective] { return run_bench_collective(*o, collective); }});
  }
  return commands;
}

}  // namespace tandem::cli
