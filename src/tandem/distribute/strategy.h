#pragma once
// Distribution strategies (tf.distribute): where replicas run and how their
// gradients are combined.
//  - one_device:   one replica on the calling thread.
//  - mirrored:     one replica per virtual CPU device, each on its own thread
//                  with its own intra-op threads, all-reducing in process.
//  - multi_worker: mirrored inside each MPI process, hierarchical all-reduce
//                  across processes (start with mpirun).
//  - parameter_server: mirrored's replica threads as workers of a parameter
//                  server in the same process (distribute/parameter_server.h):
//                  asynchronous, bounded-staleness or synchronous updates;
//                  under mpirun rank 0 serves and the other processes work
//                  (distribute/parameter_server_processes.h).
// The user states the global batch; each replica gets a share of it (see
// data::split_batch) and normalises its loss by the global example count, so
// that N replicas take the same step as one device on the whole batch.

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/comm/communicator.h"
#include "tandem/distribute/engine.h"
#include "tandem/distribute/replica_context.h"

namespace tandem::distribute {

enum class StrategyKind : uint8_t { one_device, mirrored, multi_worker, parameter_server };

// "one_device", "mirrored", "multi_worker", "parameter_server" (logs, files,
// Python); parse_strategy also takes the flags' spellings ("one-device",
// "multi-worker", "parameter-server") and throws InvalidArgument naming the
// accepted ones.
std::string_view strategy_name(StrategyKind kind);
StrategyKind parse_strategy(std::string_view name);

struct StrategyConfig {
  StrategyKind kind = StrategyKind::one_device;
  int devices = 0;  // local replicas; 0: one per physical core
  // Where replicas run: virtual CPU devices, or GPUs (cuda:0.., one replica
  // each; one_device and mirrored, whose in-process collectives reach GPU
  // memory; more replicas than GPUs split each GPU into virtual GPU devices).
  DeviceKind device_kind = DeviceKind::cpu;
  int threads_per_device = 0;           // 0: physical cores / devices (at least 1)
  bool allow_oversubscription = false;  // more devices x threads than physical cores
  // parameter_server under mpirun: ranks 0..ps_shards-1 hold the shards
  // (--ps), the others are workers.
  int ps_shards = 1;
  comm::CommOptions comm;
  // multi_worker: the communicator across processes to build on instead of
  // the launcher's (an elastic job's current generation, whose size and
  // ranks are the membership's). Null: the launcher's job.
  std::shared_ptr<comm::Communicator> processes;
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  virtual StrategyKind kind() const = 0;
  std::string name() const { return std::string(strategy_name(kind())); }
  virtual int local_replicas() const = 0;
  virtual int global_replicas() const = 0;
  // Global index of local replica 0.
  virtual int first_replica() const = 0;
  // The communicator of local replica i (null for one_device).
  virtual comm::Communicator* communicator(int local_replica) = 0;
  // Runs fn(local replica) on every local replica's thread at once and waits;
  // rethrows the first error (after every replica has returned). Inside fn
  // the replica's context is installed (ReplicaScope: device, threads,
  // cross-replica sum, ...).
  virtual void run(const std::function<void(int local_replica)>& fn) = 0;
  // What local replica i runs under (valid for the strategy's lifetime).
  virtual const ReplicaContext& replica_context(int local_replica) const = 0;
  // The engine that trains a model under this strategy (for the built-in
  // strategies: make_all_reduce_engine). The strategy must outlive it.
  virtual std::unique_ptr<Engine> make_engine(const ModelBuilder& build,
                                              const EngineOptions& options);
  // Intra-op threads of each replica.
  virtual int threads_per_replica() const = 0;
  // The device of local replica i: its thread runs under a DeviceScope for it,
  // so that its tensors are accounted to that device's allocator.
  virtual Device device(int local_replica) const = 0;
  // The process that writes checkpoints and summaries.
  virtual bool is_chief() const { return first_replica() == 0; }
  // A process of the parameter-server strategy across processes other than
  // the chief (a worker or a shard rank): it serves the chief
  // (Trainer::serve_remote_work) instead of training on its own.
  virtual bool serves_chief() const { return false; }
  // Where serves_chief(): serve_parameter_server_work or
  // serve_parameter_server_shard on its links, under this process's
  // replica context. Throws InvalidArgument elsewhere.
  virtual void serve_remote_work(nn::Module& model, const ForwardFn& forward,
                                 const EngineOptions& options,
                                 const std::function<std::vector<double>()>& take_reports);
  // Breaks every local replica's communicator (Communicator::abort): for a
  // process that gives up, so that no replica here or elsewhere waits for it.
  void abort(const std::string& reason);
  // Global replica index of a local one.
  int global_replica(int local_replica) const { return first_replica() + local_replica; }
};

// Builds a strategy. Throws InvalidArgument for an unknown name, more devices
// x threads per device (x processes on this host) than physical cores without
// allow_oversubscription (one_device with more threads than cores too), or
// multi_worker outside an MPI launcher.
std::unique_ptr<Strategy> make_strategy(const StrategyConfig& config);

// The replicas and threads make_strategy(config) would give, worked out
// without building anything (no threads, no communicators, no MPI): for
// planning. global_replicas under multi_worker is from the launcher's
// process count. Throws what make_strategy throws for a bad configuration.
struct StrategyLayout {
  int local_replicas = 1;
  int global_replicas = 1;
  int threads_per_replica = 1;
  // The replicas that train on this host's memory, over every process of
  // the job here (each worker process once under the parameter server
  // across processes: rank 0's stand-ins only evaluate); the default
  // memory limit shares the host's memory among them. GPU layouts: the
  // process's own.
  int host_replicas = 1;
};
StrategyLayout strategy_layout(const StrategyConfig& config);

}  // namespace tandem::distribute
