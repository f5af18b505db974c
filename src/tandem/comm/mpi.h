#pragma once
// Collectives between processes (on one host or many) over MPI: OpenMPI's own
// MPI_Allreduce and friends, with custom MPI operations for bf16/f16. Start
// the processes with mpirun. MPI is initialised (MPI_THREAD_MULTIPLE) on first
// use and finalised at exit.
//
// Process failure: when a rank dies, mpirun tears the job down and the
// surviving ranks exit; a synchronous MPI call cannot time out by itself, but
// Work::wait on an asynchronous one does.

#include <memory>

#include "tandem/comm/communicator.h"

namespace tandem::comm {

// Whether this build has the MPI backend (TANDEM_WITH_MPI).
bool mpi_built();
// Whether the process was started by an MPI launcher (mpirun/mpiexec).
bool launched_by_mpi();
// How many processes the launcher started, read from its environment (Open
// MPI's OMPI_COMM_WORLD_SIZE, MPICH's PMI_SIZE) without initialising MPI: 0
// when not launched by MPI, -1 when the launcher does not say.
int launched_process_count();
// Rank and size of MPI_COMM_WORLD (initialises MPI). Throw NotImplemented
// without the MPI backend.
int mpi_world_rank();
int mpi_world_size();

// A communicator over a duplicate of MPI_COMM_WORLD. Collective: every
// process must call it. bf16/f16 sums add pairwise in float32, rounding after
// each addition MPI performs.
std::unique_ptr<Communicator> make_mpi_communicator(CommOptions options = {});

}  // namespace tandem::comm
