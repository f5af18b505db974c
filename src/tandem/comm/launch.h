#pragma once
// How this process was started: alone, by an MPI launcher (mpirun), or by
// `tandem launch`, read from the launcher's environment without
// initialising anything; and the communicator over all of the job's
// processes that fits the launcher (MPI under mpirun, gloo under tandem
// launch).

#include <memory>
#include <string>

#include "tandem/comm/communicator.h"
#include "tandem/comm/elastic_group.h"

namespace tandem::comm {

enum class Launcher { none, mpi, tandem };
// "none", "mpirun", "tandem launch"
std::string_view launcher_name(Launcher launcher);

// The environment `tandem launch` gives each worker it starts.
inline constexpr const char* kRankVariable = "TANDEM_RANK";
inline constexpr const char* kWorldSizeVariable = "TANDEM_WORLD_SIZE";
inline constexpr const char* kLocalRankVariable = "TANDEM_LOCAL_RANK";
inline constexpr const char* kLocalWorldSizeVariable = "TANDEM_LOCAL_WORLD_SIZE";
inline constexpr const char* kRendezvousVariable = "TANDEM_RDZV_ENDPOINT";
inline constexpr const char* kRunIdVariable = "TANDEM_RUN_ID";
// Under tandem launch --elastic: "member" (of the first generation, rank
// TANDEM_RANK of TANDEM_WORLD_SIZE) or "joiner" (of a running job), and
// the membership's bounds.
inline constexpr const char* kElasticVariable = "TANDEM_ELASTIC";
inline constexpr const char* kMinWorkersVariable = "TANDEM_MIN_WORKERS";
inline constexpr const char* kMaxWorkersVariable = "TANDEM_MAX_WORKERS";

// MPI's variables first: a job started by mpirun inside a tandem launch
// worker is MPI's.
Launcher launcher();
// Whether the process was started by an MPI launcher (mpirun/mpiexec).
bool launched_by_mpi();
// How many processes the launcher started (Open MPI's OMPI_COMM_WORLD_SIZE,
// MPICH's PMI_SIZE, TANDEM_WORLD_SIZE): 0 when not launched, -1 when the
// launcher does not say.
int launched_process_count();
// This process's rank among them; -1 when not given.
int launched_rank();
// The job's processes on this host, and this one's index among them (Open
// MPI's OMPI_COMM_WORLD_LOCAL_SIZE/RANK, MPICH's MPI_LOCALNRANKS/
// MPI_LOCALRANKID, TANDEM_LOCAL_WORLD_SIZE/RANK): 1 and 0 when not given.
int launched_local_size();
int launched_local_rank();

// A communicator over every process of the job, rank = launched_rank():
// MPI's under mpirun, gloo's through the launch's rendezvous store under
// tandem launch. Collective: every process makes its communicators in the
// same order. Throws InvalidArgument when the process was not launched as
// a job, or was given to a store of another run (its run id differs).
std::unique_ptr<Communicator> make_process_communicator(CommOptions options = {});

// Whether tandem launch --elastic started this process.
bool launched_elastic();
// This process's place in the elastic job tandem launch --elastic started
// it in (a member of the first generation, or a joiner waiting to be taken
// in), with the launch's membership bounds over `options`'. Throws
// InvalidArgument outside such a launch or for a store of another run.
std::unique_ptr<ElasticGroup> join_elastic_job(ElasticOptions options);

}  // namespace tandem::comm
