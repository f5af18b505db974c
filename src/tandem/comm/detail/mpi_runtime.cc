// MPI's process-wide state for the MPI backend (detail/mpi_runtime.h).
#include "tandem/config.h"
#if TANDEM_HAVE_MPI
#include "tandem/comm/detail/mpi_runtime.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "tandem/base/environment.h"
#include "tandem/base/error.h"
#include "tandem/tensor/convert.h"

namespace tandem::comm::detail {
namespace {

// bf16/f16 reductions: each pairwise combination in float32, rounded once.
template <float (*Load)(uint16_t), uint16_t (*Store)(float), int Kind>
void combine_half(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = Load(a[i]), y = Load(b[i]);
    b[i] = Store(Kind == 0 ? x + y : Kind == 1 ? std::max(x, y) : std::min(x, y));
  }
}

void finalize_at_exit() {
  finalizing.store(true);
  for (int i = 0; i < 1000 && responders_running.load() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || job_broken.load()) return;
  if (abort_at_exit.load()) {
    // Everything is written; mpirun may otherwise wait for ranks that are
    // gone (Open MPI 4.1 under --enable-recovery, across hosts).
    std::fflush(nullptr);
    MPI_Abort(MPI_COMM_WORLD, 0);
  }
  if (const double limit = finalize_limit_seconds.load(); limit > 0.0) {
    // A job that lost a rank: Open MPI 4.1's MPI_Finalize may wait for it
    // forever; finalize, but give up after the limit (the process that
    // ends the job does so with end_mpi_job_at_exit).
    std::thread([limit] {
      std::this_thread::sleep_for(std::chrono::duration<double>(limit));
      std::fflush(nullptr);
      std::_Exit(0);
    }).detach();
  }
  MPI_Finalize();
}

}  // namespace

void check_mpi(int status, const char* what) {
  if (status == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, message, &length);
  TANDEM_THROW(CommError, "MPI ", what,
               " failed: ", std::string(message, static_cast<size_t>(length)));
}

std::atomic<bool> job_broken{false};
std::atomic<double> finalize_limit_seconds{0.0};
std::atomic<bool> abort_at_exit{false};

std::mutex advice_mutex;
std::string launch_advice;

std::string advice_for(const std::vector<PeerProcess>& peers) {
  std::vector<std::string> hosts;
  for (const PeerProcess& p : peers) hosts.push_back(p.host);
  std::sort(hosts.begin(), hosts.end());
  const auto count = std::unique(hosts.begin(), hosts.end()) - hosts.begin();
  // OpenMPI's mpirun hands its --mca settings to the ranks as OMPI_MCA_*.
  if (count < 2 || std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr ||
      std::getenv("OMPI_MCA_oob_tcp_keepalive_time") != nullptr)
    return {};
  return tandem::detail::concat(
      "this job spans ", count,
      " hosts, and with OpenMPI's default TCP keepalive (300 s, then 9 probes 20 s apart) "
      "mpirun waits 8 minutes or more for a host that became unreachable after the ranks have "
      "ended; run mpirun with --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 "
      "--mca oob_tcp_keepalive_probes 3 to end such a job within about 15 s "
      "(docs/multi_host.md)");
}

std::atomic<int> responders_running{0};
std::atomic<bool> finalizing{false};

// How long a rank waits for a silent peer: CommOptions::peer_timeout, or
// longer than mpirun's own TCP keepalive probing (oob_tcp_keepalive_*) where
// that is set. mpirun then finds a lost host first and ends the job whole:
// a message that a rank sent towards the lost host (its error report, or
// the MPI_Abort that follows) would sit unacknowledged in TCP, which sends
// no keepalive probes while data is outstanding, and leave mpirun or the
// lost host's daemon waiting for TCP's retransmissions (15 minutes).
std::chrono::milliseconds peer_wait(std::chrono::milliseconds peer_timeout) {
  const int idle = environment_number({"OMPI_MCA_oob_tcp_keepalive_time"}, 1);
  if (idle < 0) return peer_timeout;  // not set, or probing off
  // OpenMPI's defaults for the others: 20 s and 9 probes.
  int interval = environment_number({"OMPI_MCA_oob_tcp_keepalive_intvl"}, 1);
  int probes = environment_number({"OMPI_MCA_oob_tcp_keepalive_probes"}, 1);
  if (interval < 0) interval = 20;
  if (probes < 0) probes = 9;
  const auto launcher = std::chrono::seconds(int64_t{idle} + int64_t{interval} * probes + 3);
  return std::max<std::chrono::milliseconds>(peer_timeout, launcher);
}

MpiRuntime& runtime() {
  static std::once_flag once;
  static MpiRuntime rt;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      // Open MPI's settings come from the environment, which the front ends
      // prepare (apply_recommended_mpi_settings, mpi.h): the library does
      // not change it.
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
                "MPI_Init_thread");
      std::atexit(finalize_at_exit);
      if (provided < MPI_THREAD_MULTIPLE) {
        TANDEM_THROW(CommError, "the MPI library provides thread level ", provided,
                     ", tandem needs MPI_THREAD_MULTIPLE");
      }
    }
    check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &rt.half), "MPI_Type_contiguous");
    check_mpi(MPI_Type_commit(&rt.half), "MPI_Type_commit");
    MPI_Op_create(&combine_half<bf16_to_float, float_to_bf16, 0>, 1, &rt.bf16_ops[0]);
    MPI_Op_create(&combine_half<bf16_to_float, float_to_bf16, 1>, 1, &rt.bf16_ops[1]);
    MPI_Op_create(&combine_half<bf16_to_float, float_to_bf16, 2>, 1, &rt.bf16_ops[2]);
    MPI_Op_create(&combine_half<f16_to_float, float_to_f16, 0>, 1, &rt.f16_ops[0]);
    MPI_Op_create(&combine_half<f16_to_float, float_to_f16, 1>, 1, &rt.f16_ops[1]);
    MPI_Op_create(&combine_half<f16_to_float, float_to_f16, 2>, 1, &rt.f16_ops[2]);
  });
  return rt;
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT;
    default:
      return runtime().half;
  }
}

MPI_Op mpi_op(DType dtype, ReduceOp op) {
  const int index = op == ReduceOp::max ? 1 : op == ReduceOp::min ? 2 : 0;
  if (dtype == DType::bf16) return runtime().bf16_ops[index];
  if (dtype == DType::f16) return runtime().f16_ops[index];
  return index == 1 ? MPI_MAX : index == 2 ? MPI_MIN : MPI_SUM;
}

void abandon(std::vector<std::shared_ptr<const void> > memory) {
  static std::mutex mutex;
  static auto* kept = new std::vector<std::shared_ptr<const void> >();
  std::lock_guard<std::mutex> lock(mutex);
  kept->insert(kept->end(), std::make_move_iterator(memory.begin()),
               std::make_move_iterator(memory.end()));
}

}  // namespace tandem::comm::detail
#endif
