#pragma once
// Collectives between processes (on one host or many) over MPI: OpenMPI's own
// MPI_Allreduce and friends, with custom MPI operations for bf16/f16. Start
// the processes with mpirun. MPI is initialised (MPI_THREAD_MULTIPLE) on first
// use and finalised at exit.
//
// Failure: every collective is a non-blocking MPI call waited on by a loop
// that also watches a control channel (a second duplicate of the world
// communicator) and the deadline (CommOptions::timeout). A rank that calls
// abort() sends its reason to every rank, whose collectives then throw
// PeerFailed with it. A wait that times out asks every rank which call it
// waits in (ranks inside a collective answer from their wait loop; a stopped
// one cannot) and ends every rank with that stall report. When a rank dies,
// mpirun tears the job down. After a failure the process skips MPI_Finalize
// (it would wait for the ranks that are gone); abort_mpi_job() ends the job.

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/comm/communicator.h"

namespace tandem::comm {

// Whether this build has the MPI backend (TANDEM_WITH_MPI).
bool mpi_built();

// Open MPI settings that tandem's measurements favour, as the environment
// variables MPI_Init reads (docs/collectives.md, docs/multi_host.md): the
// non-blocking all-reduce as a ring (libnbc's default algorithms reached a
// third of the blocking call's bandwidth from 256 KiB up), and waiting ranks
// that yield the core (ranks sharing a core starved each other and the
// kernel's network processing). The library never changes the process's
// environment itself: the front ends (the `tandem` command, the Python
// module) call apply_recommended_mpi_settings() before MPI starts, and so
// may a C++ program (or pass them to mpirun as --mca settings).
struct MpiSetting {
  std::string variable;  // OMPI_MCA_...
  std::string value;
};
std::vector<MpiSetting> recommended_mpi_settings();
// Sets each recommended variable that the environment does not set (a
// user's --mca or export stands) and returns those it set. Call it before
// the first MPI use and before starting threads (setenv is not thread-safe).
std::vector<std::string> apply_recommended_mpi_settings();
// Rank and size of MPI_COMM_WORLD (initialises MPI). Throw NotImplemented
// without the MPI backend.
int mpi_world_rank();
int mpi_world_size();

// A communicator over a duplicate of MPI_COMM_WORLD. Collective: every
// process must call it. bf16/f16 sums add pairwise in float32, rounding after
// each addition MPI performs.
std::unique_ptr<Communicator> make_mpi_communicator(CommOptions options = {});

// Root's `bytes` (at most 1 MiB) on every rank, over MPI_COMM_WORLD
// (initialises MPI). Collective: every process must call it. For set-up
// exchanges (the parameter server's address), not for training traffic.
std::string mpi_broadcast(std::string bytes, int root);
// Small messages between ranks over MPI_COMM_WORLD (initialises MPI), for
// coordination (the hyperparameter search's jobs and results), not
// training traffic. mpi_send_message sends `bytes` (at most 1 MiB) to rank
// `to` and may wait until that rank receives it; mpi_poll_message returns
// the next message that has arrived from any rank (its sender and bytes),
// or nothing, without waiting.
void mpi_send_message(int to, const std::string& bytes);
std::optional<std::pair<int, std::string>> mpi_poll_message();
// For a job that goes on after one of its ranks died (the parameter
// server's lost workers, under mpirun --enable-recovery): MPI_Finalize at
// exit is given `seconds`, after which the process ends without it (status
// 0). Open MPI 4.1's finalize sometimes waits for the dead rank forever on
// one host, which accepts a process that ends without it; across hosts the
// finalize is needed, or mpirun waits.
void bound_mpi_finalize(double seconds);
// For the process that ends such a job (the parameter server): at exit,
// instead of MPI_Finalize, MPI_Abort with status 0, which makes mpirun end
// the job; Open MPI 4.1's mpirun under --enable-recovery otherwise sometimes
// waits forever after every process of a job across hosts has ended.
void end_mpi_job_at_exit();
// mpirun settings this job lacks, as advice for the user (empty when none,
// or before an MPI communicator was made): today, a job over several hosts
// whose mpirun keeps OpenMPI's TCP keepalive defaults, with which mpirun
// waits minutes for a host that became unreachable. docs/multi_host.md.
std::string mpi_launch_advice();

// For a process's last words after an error, in a job of more than one
// process: MPI_Abort on the world communicator, so that mpirun ends every
// rank (the others learned the reason from abort() where a communicator
// carried it). MPI is initialised first where the error came before it
// (the ranks that got further wait for this one in MPI_Init). Returns
// without doing anything in a single-process run.
void abort_mpi_job(int status);

}  // namespace tandem::comm
