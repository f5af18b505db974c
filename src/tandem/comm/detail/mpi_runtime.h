#pragma once
// Private to the MPI backend (TANDEM_HAVE_MPI builds only): MPI's
// process-wide state. Initialisation with the settings tandem needs and the
// bf16/f16 reduction ops (runtime()), the job's failure flags that decide
// how the process leaves MPI at exit (finalize, a bounded finalize, or an
// abort), the advice on mpirun settings, and memory broken communicators
// leave to MPI. Shared by the communicator (mpi.cc, detail/mpi_control,
// detail/mpi_ring) and the job-level calls (mpi_job.cc).

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/comm/communicator.h"
#include "tandem/comm/detail/peer_process.h"

namespace tandem::comm::detail {

// Throws CommError with MPI's message unless status is MPI_SUCCESS.
void check_mpi(int status, const char* what);

struct MpiRuntime {
  MPI_Datatype half = MPI_DATATYPE_NULL;                         // 2 opaque bytes
  MPI_Op bf16_ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum, max, min
  MPI_Op f16_ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

// Initialises MPI (MPI_THREAD_MULTIPLE) on first use, with the ops above;
// finalises at exit as the flags below say.
MpiRuntime& runtime();
MPI_Datatype mpi_type(DType dtype);
MPI_Op mpi_op(DType dtype, ReduceOp op);

// Set once a wait timed out (a rank stopped answering) or the job is being
// aborted: MPI_Finalize would then wait for ranks that never arrive. A peer's
// abort notice does not set it: the failing rank is alive and may finalise.
extern std::atomic<bool> job_broken;
extern std::atomic<double> finalize_limit_seconds;  // > 0: bound_mpi_finalize
extern std::atomic<bool> abort_at_exit;             // end_mpi_job_at_exit
// Communicators' responder threads still running, and the exit's request
// that they stop: none may call MPI during or after MPI_Finalize.
extern std::atomic<int> responders_running;
extern std::atomic<bool> finalizing;

// mpirun settings a job over these processes' hosts lacks (empty: none).
std::string advice_for(const std::vector<PeerProcess>& peers);
// Set by the first communicator that sees the job's hosts.
extern std::mutex advice_mutex;
extern std::string launch_advice;

// How long a rank waits for a silent peer (see mpi_runtime.cc).
std::chrono::milliseconds peer_wait(std::chrono::milliseconds peer_timeout);
// Memory of broken communicators that MPI may still write: never freed.
void abandon(std::vector<std::shared_ptr<const void> > memory);

}  // namespace tandem::comm::detail
