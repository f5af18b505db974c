#pragma once
// The parameter-server strategy across MPI processes
// (`mpirun -np P tandem train --strategy parameter-server --ps 1`): rank 0
// is the server and the chief (the parameters, the optimizer and its state,
// the Trainer's loop, evaluation, checkpoints and the run directory); ranks
// 1..P-1 are the P-1 workers, worker r = rank r + 1. The server's engine is
// the one-process engine (parameter_server.h) whose workers are these
// processes: each share of a batch travels to a free worker with the
// current parameters, and its gradient, loss and metric sums come back (TF
// 2's ClusterCoordinator: the coordinator schedules, workers compute; the
// workers need the model and the loss, not the data).
//
// Faults: a worker that dies (its connection ends) or falls silent for the
// peer timeout is lost: the server says so on stderr and trains on with
// the others (an asynchronous share it held goes to another worker; a
// synchronous round completes without it); a silent one that runs on the
// server's host is killed at the end, so that mpirun does not wait for it
// (one on another host must be ended there). Under `mpirun` this needs
// `--enable-recovery`, without which mpirun ends the job when any rank
// dies. A lost server ends every worker with an error naming it at once
// (its connection ends) or after the peer timeout (stopped, cut off).

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/distribute/engine.h"

namespace tandem::distribute {

namespace detail {
class WorkerLink;
}

// Rank 0's connections to its workers.
struct RemoteWorkers {
  RemoteWorkers();
  ~RemoteWorkers();
  std::vector<std::unique_ptr<detail::WorkerLink>> links;  // worker r = rank r + 1
  std::vector<std::string> names;  // "worker 1 (rank 2, pid N on host h)"
  std::vector<int> pids;           // each worker's process, and whether it runs on this host
  std::vector<bool> on_this_host;
  double silence_seconds = 15.0;   // a peer this long silent is lost
};

// After a lost worker every remaining process bounds its MPI_Finalize at
// exit by this (comm::bound_mpi_finalize): Open MPI 4.1 may wait for the
// dead rank there forever.
inline constexpr double kFinalizeSeconds = 1.0;

// Whether this process is one of several that mpirun started for the
// parameter-server strategy (then rank 0 serves and the others work).
bool parameter_server_across_processes();

// Rank 0: listens on a port of its own, broadcasts its addresses (the one
// MPI call, collective), and accepts the `workers` workers. Throws Timeout
// when one does not connect within a minute.
std::shared_ptr<RemoteWorkers> accept_remote_workers(int workers, double silence_seconds);

// Ranks >= 1: the other side of the broadcast, then a connection to rank 0.
std::unique_ptr<detail::WorkerLink> connect_to_parameter_server();

// A worker's loop: takes shares of batches with the parameters to compute
// them at, runs `forward` and backward on `model` (under `context`), and
// sends back the gradient, the loss sum and `take_reports()` (the caller's
// sums since the last call, e.g. the Trainer's metric sums), until the
// server says stop. Throws PeerFailed when the server is lost (its
// connection ends, or it is silent for `silence_seconds`).
void serve_parameter_server_work(detail::WorkerLink& link, nn::Module& model,
                                 const ForwardFn& forward, const EngineOptions& options,
                                 const ReplicaContext& context,
                                 const std::function<std::vector<double>()>& take_reports,
                                 double silence_seconds);

}  // namespace tandem::distribute
