#pragma once
// The parameter-server strategy across MPI processes
// (`mpirun -np P tandem train --strategy parameter-server --ps N`): ranks
// 0..N-1 hold the N parameter-server shards (variable_partition.h says
// which pieces of which variables each holds: their values, the optimizer
// and its state), and rank 0 is also the chief (the Trainer's loop, the
// data, evaluation, checkpoints and the run directory); ranks N..P-1 are
// the P-N workers, worker r = rank N + r. The chief's engine is the
// one-process engine (parameter_server.h) whose workers are these
// processes: each share of a batch travels to a free worker with the
// version to compute it at and shard 0's values; the worker pulls the other
// shards' values from their ranks, computes, pushes each shard its part of
// the gradient, and reports the loss, the metric sums and shard 0's part to
// the chief (TF 2's ClusterCoordinator: the coordinator schedules, workers
// compute; the workers need the model and the loss, not the data). The
// chief decides every update (staleness, rounds, backup workers, loss
// scaling) and tells the shard ranks which gradients to apply; so each
// worker's traffic is spread over the N server ranks. ps_messages.h has
// what travels.
//
// Faults: a worker that dies (its connection ends) or falls silent for the
// peer timeout is lost: the chief warns (tandem::warn) and trains on with
// the others (an asynchronous share it held goes to another worker; a
// synchronous round completes without it); a silent one that runs on the
// chief's host is killed at the end, so that mpirun does not wait for it
// (one on another host must be ended there). Under `mpirun` this needs
// `--enable-recovery`, without which mpirun ends the job when any rank
// dies. A lost server rank (the chief or a shard rank) ends every process
// with an error naming it: at once when its connections end, after the
// peer timeout when it is silent.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/distribute/engine.h"

namespace tandem::distribute {

namespace detail {
class WorkerLink;
}

// Rank 0's connections to its workers and to the other shard ranks.
struct RemoteWorkers {
  RemoteWorkers();
  ~RemoteWorkers();
  std::vector<std::unique_ptr<detail::WorkerLink>> links;  // worker r = rank N + r
  std::vector<std::string> names;                          // "worker 1 (rank 2, pid N on host h)"
  std::vector<int> pids;  // each worker's process, and whether it runs on this host
  std::vector<bool> on_this_host;
  double silence_seconds = 15.0;  // a peer this long silent is lost
  // Shard k >= 1 = rank k (empty with one shard): they answer what the
  // chief asks and send nothing else, so the chief does not hear from them
  // between requests.
  std::vector<std::unique_ptr<detail::WorkerLink>> shard_links;
};

// After a lost worker every remaining process bounds its MPI_Finalize at
// exit by this (comm::bound_mpi_finalize): Open MPI 4.1 may wait for the
// dead rank there forever.
inline constexpr double kFinalizeSeconds = 1.0;

// Whether this process is one of several that mpirun started for the
// parameter-server strategy (then ranks below --ps serve and the others work).
bool parameter_server_across_processes();

// The bootstrap, one call on every rank of the job (each server rank
// listens on a port of its own and broadcasts its addresses: the only MPI
// calls, collective). Each throws Timeout when a peer does not connect
// within a minute.
// Rank 0: accepts the `workers` workers and the `shards` - 1 shard ranks.
std::shared_ptr<RemoteWorkers> accept_remote_workers(int workers, int shards,
                                                     double silence_seconds);
// A worker rank: its connections to every server rank (rank k at index k).
std::vector<std::unique_ptr<detail::WorkerLink>> connect_to_parameter_servers(int shards);
// Shard rank k (1 <= k < shards): its connection to rank 0 and those of
// the `workers` workers (worker r at index r).
struct ShardRankLinks {
  ShardRankLinks();
  ~ShardRankLinks();
  ShardRankLinks(ShardRankLinks&&) noexcept;
  std::unique_ptr<detail::WorkerLink> chief;
  std::vector<std::unique_ptr<detail::WorkerLink>> workers;
};
ShardRankLinks accept_shard_clients(int shards, int workers);

// A worker's loop: takes shares of batches with the version to compute
// them at, pulls the parameters (shard 0's come with the work), runs
// `forward` and backward on `model` (under `context`), pushes each shard
// rank its part of the gradient and sends the chief the rest, the loss sum
// and `take_reports()` (the caller's sums since the last call, e.g. the
// Trainer's metric sums), until the chief says stop. Throws PeerFailed
// when a server rank is lost (its connection ends, or it is silent for
// `silence_seconds`).
void serve_parameter_server_work(std::vector<std::unique_ptr<detail::WorkerLink>>& servers,
                                 nn::Module& model, const ForwardFn& forward,
                                 const EngineOptions& options, const ReplicaContext& context,
                                 const std::function<std::vector<double>()>& take_reports,
                                 double silence_seconds);

// Shard rank k's loop: keeps shard k of `model`'s parameters (the chief
// sends their values) and its optimizer, answers the workers' pulls and
// stores their pushes, and applies the updates the chief orders, until the
// chief says stop. Throws PeerFailed when the chief is lost.
void serve_parameter_server_shard(ShardRankLinks& links, int shard, nn::Module& model,
                                  const EngineOptions& options, double silence_seconds);

}  // namespace tandem::distribute
