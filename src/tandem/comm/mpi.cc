// The MPI communicator (mpi.h): non-blocking collectives and the wait that
// can give them up. MPI's process-wide state is in detail/mpi_runtime, the
// control channel (failures, heartbeats, the stall report) in
// detail/mpi_control, the rings in detail/mpi_ring, the job-level calls in
// mpi_job.cc.
#include "tandem/comm/mpi.h"

#include "tandem/base/error.h"
#include "tandem/config.h"

#if TANDEM_HAVE_MPI
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <thread>

#include "tandem/comm/detail/mpi_control.h"
#include "tandem/comm/detail/mpi_ring.h"
#include "tandem/comm/detail/mpi_runtime.h"
#include "tandem/comm/detail/reduce_kernels.h"
#endif

namespace tandem::comm {

bool mpi_built() {
  return TANDEM_HAVE_MPI == 1;
}

#if !TANDEM_HAVE_MPI

std::unique_ptr<Communicator> make_mpi_communicator(CommOptions) {
  TANDEM_THROW(NotImplemented, "this build has no MPI backend (TANDEM_WITH_MPI=OFF)");
}

#else

namespace {

using detail::check_mpi;
using detail::mpi_op;
using detail::mpi_type;

// MPI counts are int: larger buffers go in pieces.
constexpr int64_t kMaxPiece = int64_t{1} << 30;
using Clock = std::chrono::steady_clock;
// How long a wait tests without sleeping.
constexpr std::chrono::milliseconds kSpinTime{100};

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(CommOptions options)
      : Communicator(options), control_(options.peer_timeout) {
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    ring_ = {.comm = comm_,
             .rank = rank_,
             .size = size_,
             .wait = [this](MPI_Request& request, const Call& call, const char* what,
                            std::shared_ptr<const void> scratch) {
               wait(request, call, what, std::move(scratch));
             }};
  }
  ~MpiCommunicator() override {
    drain();  // bounded: a broken communicator refuses queued calls at once
    // A broken one may have requests pending: leave the communicator to MPI.
    const bool broken = control_.close();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!broken && !finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  std::string_view all_reduce_algorithm(int64_t) const override { return "MPI_Allreduce"; }
  void abort(const std::string& reason) override { control_.abort(reason); }

 protected:
  void run(const Call& call) override;

 private:
  void verify(const Call& call);
  // Waits for a non-blocking collective of `call`, watching the control
  // channel and the deadline; throws PeerFailed or Timeout. The request is
  // then left pending (a peer may still join it, and MPI complete it
  // later), so the call's buffers and `scratch` (any other buffer the
  // request uses) are quarantined: kept alive as long as the channel.
  void wait(MPI_Request& request, const Call& call, const char* what,
            std::shared_ptr<const void> scratch = nullptr);
  void run_collective(const Call& call);

  detail::MpiControl control_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  detail::MpiRing ring_;
};

void MpiCommunicator::wait(MPI_Request& request, const Call& call, const char* what,
                           std::shared_ptr<const void> scratch) {
  const auto start = Clock::now();
  const auto deadline = start + options().timeout;
  for (uint32_t i = 0;; ++i) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    // Non-blocking collectives progress only inside MPI calls: test without
    // pause while a collective usually completes, then back off so that a
    // long wait (a slow peer) does not take a core from the computation.
    const auto waited = Clock::now() - start;
    if ((i & 63) != 0 && waited < kSpinTime) continue;
    control_.poll();
    const bool refused = control_.must_refuse();
    const int silent = waited > detail::MpiControl::kHeartbeat ? control_.silent_peer() : -1;
    const bool timed_out = Clock::now() > deadline;
    if (refused || silent >= 0 || timed_out) {
      for (const Tensor& t : {call.input, call.output})
        if (t.defined()) control_.quarantine(std::make_shared<const Tensor>(t));
      if (scratch) control_.quarantine(std::move(scratch));
    }
    if (refused) control_.refuse(call);
    if (silent >= 0) control_.unreachable(call, what, silent);
    if (timed_out) control_.stall(call, what, options().timeout);
    if (waited > kSpinTime) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void MpiCommunicator::verify(const Call& call) {
  // On the heap: an abandoned check may still be completed by MPI later.
  const auto buffer = std::make_shared<std::array<int64_t, 12> >(call.check_fields());
  MPI_Request request;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buffer->data(), 12, MPI_INT64_T, MPI_MAX, comm_, &request),
            "MPI_Iallreduce (call check)");
  wait(request, call, "MPI_Iallreduce (call check)", buffer);
  call.check_agreement(*buffer, "MPI", rank_);
}

void MpiCommunicator::run(const Call& call) {
  control_.call_started();
  if (control_.must_refuse()) control_.refuse(call);
  run_collective(call);
  control_.call_finished();
}

void MpiCommunicator::run_collective(const Call& call) {
  if (!call.error.empty() && !options().verify_calls) {
    // The peers run their real collective, not the check, so this rank's
    // check would be paired with it: break the group instead (they end
    // with PeerFailed) and fail here.
    abort(call.error);
    TANDEM_THROW(CommError, call.error);
  }
  if (options().verify_calls || !call.error.empty()) {
    verify(call);
    // The check is an all-reduce: every rank has arrived once it returns.
    mark_all_ranks_arrived();
  }
  const MPI_Datatype type = mpi_type(call.dtype);
  const size_t element = dtype_size(call.dtype);
  // Non-blocking calls and a wait that can give up: a blocking MPI call
  // cannot be left when a peer fails or stops.
  MPI_Request request = MPI_REQUEST_NULL;
  switch (call.collective) {
    case Collective::barrier:
      check_mpi(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
      wait(request, call, "MPI_Ibarrier");
      return;
    case Collective::all_reduce: {
      const bool in_place = call.input.raw_data() == call.output.raw_data();
      const MPI_Op op = mpi_op(call.dtype, call.op);
      for (int64_t begin = 0; begin < call.count; begin += kMaxPiece) {
        const int n = static_cast<int>(std::min(kMaxPiece, call.count - begin));
        void* out = static_cast<char*>(call.output.raw_data()) + begin * element;
        const void* in = in_place
                             ? MPI_IN_PLACE
                             : static_cast<const char*>(call.input.raw_data()) + begin * element;
        check_mpi(MPI_Iallreduce(in, out, n, type, op, comm_, &request), "MPI_Iallreduce");
        wait(request, call, "MPI_Iallreduce");
      }
      if (call.op == ReduceOp::mean) {
        kernels::scale_in_place(call.dtype, call.output.raw_data(), call.output.numel(),
                                1.0f / static_cast<float>(size_));
      }
      return;
    }
    case Collective::reduce_scatter:
      if (call.count / size_ > kMaxPiece)
        TANDEM_THROW(NotImplemented, "reduce_scatter segments over 2^30 elements");
      detail::ring_reduce_scatter(ring_, call, type);
      if (call.op == ReduceOp::mean) {
        kernels::scale_in_place(call.dtype, call.output.raw_data(), call.output.numel(),
                                1.0f / static_cast<float>(size_));
      }
      return;
    case Collective::all_gather:
      if (call.count > kMaxPiece)
        TANDEM_THROW(NotImplemented, "all_gather inputs over 2^30 elements");
      detail::ring_all_gather(ring_, call, type);
      return;
    case Collective::broadcast:
      for (int64_t begin = 0; begin < call.count; begin += kMaxPiece) {
        const int n = static_cast<int>(std::min(kMaxPiece, call.count - begin));
        check_mpi(MPI_Ibcast(static_cast<char*>(call.output.raw_data()) + begin * element, n, type,
                             call.root, comm_, &request),
                  "MPI_Ibcast");
        wait(request, call, "MPI_Ibcast");
      }
      return;
  }
}

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(CommOptions options) {
  return std::make_unique<MpiCommunicator>(options);
}

#endif

}  // namespace tandem::comm
