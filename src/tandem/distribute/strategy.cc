#include "tandem/distribute/strategy.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/base/name_table.h"
#include "tandem/base/parallel.h"
#include "tandem/comm/hierarchical.h"
#include "tandem/comm/inprocess.h"
#include "tandem/comm/launch.h"
#include "tandem/comm/mpi.h"
#include "tandem/comm/nccl.h"
#include "tandem/distribute/detail/worker_link.h"
#include "tandem/distribute/parameter_server.h"
#include "tandem/distribute/parameter_server_processes.h"

namespace tandem::distribute {

namespace {

constexpr NameTable<StrategyKind, 7> kStrategies{
    "strategy",
    {{{StrategyKind::one_device, "one_device"},
      {StrategyKind::mirrored, "mirrored"},
      {StrategyKind::multi_worker, "multi_worker"},
      {StrategyKind::parameter_server, "parameter_server"},
      {StrategyKind::one_device, "one-device"},
      {StrategyKind::multi_worker, "multi-worker"},
      {StrategyKind::parameter_server, "parameter-server"}}}};

}  // namespace

std::string_view strategy_name(StrategyKind kind) {
  return kStrategies.name(kind);
}

StrategyKind parse_strategy(std::string_view name) {
  return kStrategies.parse(name);
}

namespace {

class OneDevice : public Strategy {
 public:
  explicit OneDevice(int threads)
      : OneDevice(ReplicaContext{.device = cpu_device(), .threads = threads}) {}
  explicit OneDevice(const ReplicaContext& context) : context_(context) {}
  StrategyKind kind() const override { return StrategyKind::one_device; }
  int local_replicas() const override { return 1; }
  int global_replicas() const override { return context_.num_replicas; }
  int first_replica() const override { return context_.global_replica; }
  comm::Communicator* communicator(int) override { return nullptr; }
  int threads_per_replica() const override { return context_.threads; }
  Device device(int) const override { return context_.device; }
  const ReplicaContext& replica_context(int) const override { return context_; }
  void run(const std::function<void(int)>& fn) override {
    ReplicaScope scope(context_);
    fn(0);
  }

 private:
  ReplicaContext context_;
};

// Persistent replica threads, each taking one task per step under its context.
class ReplicaThreads {
 public:
  explicit ReplicaThreads(const std::vector<ReplicaContext>& contexts) {
    for (const ReplicaContext& c : contexts) threads_.emplace_back([this, &c] { loop(c); });
  }
  ~ReplicaThreads() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void run(const std::function<void(int)>& fn) {
    std::unique_lock<std::mutex> lock(mutex_);
    task_ = &fn;
    ++generation_;
    remaining_ = static_cast<int>(threads_.size());
    first_error_ = nullptr;
    first_error_from_peer_ = false;
    cv_.notify_all();
    done_cv_.wait(lock, [this] { return remaining_ == 0; });
    task_ = nullptr;
    if (first_error_) std::rethrow_exception(first_error_);
  }

 private:
  void loop(const ReplicaContext& context) {
    ReplicaScope scope(context);
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      const std::function<void(int)>* task = task_;
      lock.unlock();
      std::exception_ptr error;
      bool from_peer = false;
      try {
        (*task)(context.local_replica);
      } catch (const PeerFailed&) {
        error = std::current_exception();
        from_peer = true;
      } catch (const std::exception& e) {
        error = std::current_exception();
        // The other replicas may be waiting for this one in a collective:
        // break the group so that they fail now with this reason.
        if (context.communicator != nullptr) {
          context.communicator->abort(
              tandem::detail::concat("replica ", context.global_replica, " failed: ", e.what()));
        }
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      // The failure itself, not a peer's report of it, is what run() throws.
      if (error && (!first_error_ || (first_error_from_peer_ && !from_peer))) {
        first_error_ = error;
        first_error_from_peer_ = from_peer;
      }
      if (--remaining_ == 0) done_cv_.notify_all();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* task_ = nullptr;
  uint64_t generation_ = 0;
  int remaining_ = 0;
  bool stopping_ = false;
  std::exception_ptr first_error_;
  bool first_error_from_peer_ = false;
};

// Where a group's replicas sit among every process's replicas.
int first_global_replica(const comm::InProcessGroup&) {
  return 0;
}
int global_replica_count(const comm::InProcessGroup& group) {
  return group.size();
}
int first_global_replica(const comm::NcclGroup&) {
  return 0;
}
int global_replica_count(const comm::NcclGroup& group) {
  return group.size();
}
int first_global_replica(const comm::HierarchicalGroup& group) {
  return group.process_rank() * group.local_size();
}
int global_replica_count(const comm::HierarchicalGroup& group) {
  return group.local_size() * group.process_count();
}

// Replicas on threads of this process, each with its communicator from a
// group (in-process or hierarchical) that the strategy keeps alive.
template <typename Group>
class ThreadedStrategy : public Strategy {
 public:
  ThreadedStrategy(std::unique_ptr<Group> group, int devices, int threads,
                   DeviceKind kind = DeviceKind::cpu)
      : group_(std::move(group)) {
    const int first_replica = first_global_replica(*group_);
    const int global_replicas = global_replica_count(*group_);
    for (int r = 0; r < devices; ++r) comms_.push_back(group_->communicator(r));
    for (int r = 0; r < devices; ++r) {
      contexts_.push_back({.local_replica = r,
                           .global_replica = first_replica + r,
                           .num_replicas = global_replicas,
                           .device = Device{kind, r},
                           .threads = threads,
                           .communicator = comms_[r].get()});
    }
    replicas_ = std::make_unique<ReplicaThreads>(contexts_);
  }
  ~ThreadedStrategy() override {
    replicas_.reset();  // threads first: they use the communicators and contexts
  }
  int local_replicas() const override { return static_cast<int>(comms_.size()); }
  int global_replicas() const override { return contexts_.front().num_replicas; }
  int first_replica() const override { return contexts_.front().global_replica; }
  comm::Communicator* communicator(int r) override { return comms_.at(r).get(); }
  int threads_per_replica() const override { return contexts_.front().threads; }
  Device device(int local_replica) const override { return contexts_.at(local_replica).device; }
  const ReplicaContext& replica_context(int local_replica) const override {
    return contexts_.at(local_replica);
  }
  void run(const std::function<void(int)>& fn) override { replicas_->run(fn); }

 protected:
  const Group& group() const { return *group_; }

 private:
  std::unique_ptr<Group> group_;
  std::vector<std::unique_ptr<comm::Communicator>> comms_;
  std::vector<ReplicaContext> contexts_;  // never resized once the threads hold references
  std::unique_ptr<ReplicaThreads> replicas_;
};

class Mirrored : public ThreadedStrategy<comm::InProcessGroup> {
 public:
  // On GPUs (kind cuda) the in-process collectives run over GPU memory:
  // replicas on virtual GPU devices of one GPU, or GPUs with peer access.
  Mirrored(int devices, int threads, const comm::CommOptions& options,
           DeviceKind kind = DeviceKind::cpu)
      : ThreadedStrategy(std::make_unique<comm::InProcessGroup>(
                             devices, comm::InProcessOptions{.comm = options}),
                         devices, threads, kind) {}
  StrategyKind kind() const override { return StrategyKind::mirrored; }
};

// Mirrored over distinct GPUs of this process, all-reducing with NCCL (the
// choice of TensorFlow's MirroredStrategy and PyTorch DDP on GPUs).
class MirroredNccl : public ThreadedStrategy<comm::NcclGroup> {
 public:
  MirroredNccl(int devices, int threads, const comm::CommOptions& options)
      : ThreadedStrategy(std::make_unique<comm::NcclGroup>(gpus(devices), options), devices,
                         threads, DeviceKind::cuda) {}
  StrategyKind kind() const override { return StrategyKind::mirrored; }

 private:
  static std::vector<Device> gpus(int count) {
    std::vector<Device> devices;
    for (int i = 0; i < count; ++i) devices.push_back(Device{DeviceKind::cuda, i});
    return devices;
  }
};

// Mirrored's replica threads, as the workers of a parameter-server engine;
// on the server rank of a job across processes, stand-ins for the worker
// processes (their models hold what travels to and from them).
class ParameterServer : public Mirrored {
 public:
  ParameterServer(int devices, int threads, const comm::CommOptions& options,
                  std::shared_ptr<RemoteWorkers> remote = {})
      : Mirrored(devices, threads, options), remote_(std::move(remote)) {}
  StrategyKind kind() const override { return StrategyKind::parameter_server; }
  std::unique_ptr<Engine> make_engine(const ModelBuilder& build,
                                      const EngineOptions& options) override {
    return make_parameter_server_engine(*this, build, options, remote_);
  }

 private:
  std::shared_ptr<RemoteWorkers> remote_;
};

// A process of the parameter-server strategy across processes other than
// the chief: a worker or a shard rank. Its engine (the Trainer builds one)
// is one device's: a worker computes the chief's work on its model, a
// shard rank takes the variables' shapes from it.
class ParameterServerPeer : public OneDevice {
 public:
  ParameterServerPeer(int global_replica, int threads, int workers, double silence_seconds)
      : OneDevice(ReplicaContext{.global_replica = global_replica,
                                 .num_replicas = workers,
                                 .device = cpu_device(),
                                 .threads = threads}),
        single_(threads),
        silence_seconds_(silence_seconds) {}
  StrategyKind kind() const override { return StrategyKind::parameter_server; }
  bool is_chief() const override { return false; }
  bool serves_chief() const override { return true; }
  std::unique_ptr<Engine> make_engine(const ModelBuilder& build,
                                      const EngineOptions& options) override {
    EngineOptions local = options;
    local.slow_replica = {};  // checked against the job's workers on the chief
    local.parameter_server = {};
    return make_all_reduce_engine(single_, build, local);
  }

 protected:
  double silence_seconds() const { return silence_seconds_; }

 private:
  OneDevice single_;  // what its engine runs on: one replica of one
  double silence_seconds_;
};

// A worker process: worker rank - N of the job's workers, where ranks
// 0..N-1 hold the N shards (--ps N).
class ParameterServerWorker : public ParameterServerPeer {
 public:
  ParameterServerWorker(int rank, int shards, int threads, int workers,
                        std::vector<std::unique_ptr<detail::WorkerLink>> servers,
                        double silence_seconds)
      : ParameterServerPeer(rank - shards, threads, workers, silence_seconds),
        servers_(std::move(servers)) {}
  void serve_remote_work(nn::Module& model, const ForwardFn& forward, const EngineOptions& options,
                         const std::function<std::vector<double>()>& take_reports) override {
    serve_parameter_server_work(servers_, model, forward, options, replica_context(0), take_reports,
                                silence_seconds());
  }

 private:
  std::vector<std::unique_ptr<detail::WorkerLink>> servers_;  // rank k at index k
};

// Shard rank `shard` (>= 1; the chief keeps shard 0).
class ParameterServerShardRank : public ParameterServerPeer {
 public:
  ParameterServerShardRank(int shard, int threads, int workers, ShardRankLinks links,
                           double silence_seconds)
      : ParameterServerPeer(0, threads, workers, silence_seconds),
        shard_(shard),
        links_(std::move(links)) {}
  void serve_remote_work(nn::Module& model, const ForwardFn&, const EngineOptions& options,
                         const std::function<std::vector<double>()>&) override {
    serve_parameter_server_shard(links_, shard_, model, options, silence_seconds());
  }

 private:
  int shard_;
  ShardRankLinks links_;
};

// multi_worker on GPUs: this process's one replica on GPU (local rank mod
// GPUs), all-reducing with NCCL, bootstrapped over the job's process
// communicator (MPI or gloo).
class MultiWorkerNccl : public Strategy {
 public:
  MultiWorkerNccl(int threads, const comm::CommOptions& options)
      : bootstrap_(comm::make_process_communicator(options)) {
    const Device device{DeviceKind::cuda, comm::launched_local_rank() % cuda_gpu_count()};
    nccl_ = comm::make_nccl_communicator(*bootstrap_, device, options);
    context_ = ReplicaContext{.global_replica = nccl_->rank(),
                              .num_replicas = nccl_->size(),
                              .device = device,
                              .threads = threads,
                              .communicator = nccl_.get()};
  }
  StrategyKind kind() const override { return StrategyKind::multi_worker; }
  int local_replicas() const override { return 1; }
  int global_replicas() const override { return context_.num_replicas; }
  int first_replica() const override { return context_.global_replica; }
  comm::Communicator* communicator(int) override { return nccl_.get(); }
  int threads_per_replica() const override { return context_.threads; }
  Device device(int) const override { return context_.device; }
  const ReplicaContext& replica_context(int) const override { return context_; }
  void run(const std::function<void(int)>& fn) override {
    ReplicaScope scope(context_);
    fn(0);
  }

 private:
  std::unique_ptr<comm::Communicator> bootstrap_, nccl_;
  ReplicaContext context_;
};

class MultiWorker : public ThreadedStrategy<comm::HierarchicalGroup> {
 public:
  MultiWorker(int devices, int threads, const comm::CommOptions& options,
              std::shared_ptr<comm::Communicator> processes)
      : ThreadedStrategy(
            std::make_unique<comm::HierarchicalGroup>(devices, std::move(processes), options),
            devices, threads) {}
  StrategyKind kind() const override { return StrategyKind::multi_worker; }
};

}  // namespace

void Strategy::serve_remote_work(nn::Module&, const ForwardFn&, const EngineOptions&,
                                 const std::function<std::vector<double>()>&) {
  TANDEM_THROW(InvalidArgument, "strategy ", name(),
               " serves no remote work: only a worker process of the parameter-server strategy "
               "under mpirun does");
}

void Strategy::abort(const std::string& reason) {
  for (int r = 0; r < local_replicas(); ++r) {
    if (comm::Communicator* c = communicator(r)) c->abort(reason);
  }
}

std::unique_ptr<Engine> Strategy::make_engine(const ModelBuilder& build,
                                              const EngineOptions& options) {
  return make_all_reduce_engine(*this, build, options);
}

namespace {

// Refuses more busy threads than physical cores: replicas (or one device's
// OpenMP team) would slow each other down, one device as much as several.
void check_subscription(const StrategyConfig& c, int processes_here, int devices, int threads,
                        int cores) {
  const int64_t needed = int64_t{devices} * threads * processes_here;
  if (needed <= cores || c.allow_oversubscription) return;
  TANDEM_THROW(InvalidArgument,
               processes_here > 1 ? std::to_string(processes_here) + " processes x " : "", devices,
               " device(s) x ", threads, " thread(s) need ", needed, " cores but this machine has ",
               cores,
               " physical cores (threads would slow each other down; to do it anyway, set "
               "allow_oversubscription: --allow-oversubscription on the command line, "
               "fit(allow_oversubscription=True) in Python)");
}

// Replicas on GPUs: one per GPU (more become virtual GPU devices) in a
// process; under multi_worker, one process per GPU.
StrategyLayout gpu_layout(const StrategyConfig& c) {
  if (c.kind != StrategyKind::one_device && c.kind != StrategyKind::mirrored &&
      c.kind != StrategyKind::multi_worker) {
    TANDEM_THROW(NotImplemented, "strategy ", strategy_name(c.kind),
                 " does not run on GPUs (its workers and shards exchange host memory); use "
                 "one-device, mirrored or multi-worker with --device cuda");
  }
  const int gpus = cuda_gpu_count();
  if (gpus < 1) {
    TANDEM_THROW(InvalidArgument, "--device cuda: this machine has no CUDA device",
                 cuda_built() ? "" : " (and this build of tandem has no CUDA backend)");
  }
  // One host thread drives each GPU replica (the input pipeline has its own).
  const int threads = c.threads_per_device > 0 ? c.threads_per_device : 1;
  if (c.kind == StrategyKind::multi_worker) {
    if (comm::launcher() == comm::Launcher::none) {
      TANDEM_THROW(InvalidArgument,
                   "strategy multi_worker needs its processes started by mpirun or tandem launch "
                   "(e.g. tandem launch --nproc-per-node 2 -- tandem train --strategy "
                   "multi-worker --device cuda)");
    }
    if (c.devices > 1) {
      TANDEM_THROW(InvalidArgument,
                   "multi_worker on GPUs runs one replica per process (on GPU local rank mod "
                   "GPUs); got --devices ",
                   c.devices, " (start one process per GPU instead)");
    }
    const int processes = std::max(1, comm::launched_process_count());
    return {.local_replicas = 1,
            .global_replicas = processes,
            .threads_per_replica = threads,
            .host_replicas = 1};  // each on a GPU of its own
  }
  if (c.kind == StrategyKind::one_device && c.devices > 1) {
    TANDEM_THROW(InvalidArgument, "strategy one_device runs one replica; got ", c.devices,
                 " devices (use the mirrored strategy: --strategy mirrored)");
  }
  const int devices = c.kind == StrategyKind::one_device ? 1 : (c.devices > 0 ? c.devices : gpus);
  if (devices > gpus && devices % gpus != 0) {
    TANDEM_THROW(InvalidArgument, devices, " GPU replicas on ", gpus,
                 " GPU(s): more replicas "
                 "than GPUs become virtual GPU devices, an equal number on each GPU");
  }
  return {.local_replicas = devices,
          .global_replicas = devices,
          .threads_per_replica = threads,
          .host_replicas = devices};
}

}  // namespace

StrategyLayout strategy_layout(const StrategyConfig& c) {
  strategy_name(c.kind);  // refuses a value outside the enum
  const int cores = std::max(1, cpu_info().physical_cores);
  if (c.devices < 0 || c.threads_per_device < 0) {
    TANDEM_THROW(InvalidArgument, "devices and threads per device must be positive, got ",
                 c.devices, " and ", c.threads_per_device);
  }
  if (c.device_kind == DeviceKind::cuda) return gpu_layout(c);
  if (c.kind == StrategyKind::one_device) {
    if (c.devices > 1) {
      TANDEM_THROW(InvalidArgument, "strategy one_device runs one replica; got ", c.devices,
                   " devices (use the mirrored strategy: --strategy mirrored)");
    }
    const int threads = c.threads_per_device > 0 ? c.threads_per_device : cores;
    check_subscription(c, 1, 1, threads, cores);
    return {.local_replicas = 1,
            .global_replicas = 1,
            .threads_per_replica = threads,
            .host_replicas = 1};
  }
  // Processes of this job on this host share its cores (multi_worker and
  // the parameter server under mpirun).
  int processes_here = 1, processes = 1;
  const bool across_processes =
      c.kind == StrategyKind::multi_worker || parameter_server_across_processes();
  if (across_processes) processes_here = comm::launched_local_size();
  if (c.kind == StrategyKind::parameter_server && comm::launcher() == comm::Launcher::tandem &&
      comm::launched_process_count() > 1) {
    TANDEM_THROW(InvalidArgument,
                 "the parameter-server strategy across processes runs under mpirun (its links "
                 "are set up over MPI); under tandem launch use --strategy multi-worker");
  }
  if (c.kind == StrategyKind::parameter_server && parameter_server_across_processes()) {
    // Ranks below ps_shards serve; every other process is one worker.
    if (c.devices > 1) {
      TANDEM_THROW(InvalidArgument,
                   "under mpirun each parameter-server worker is one process "
                   "with one replica; got --devices ",
                   c.devices, " (start more processes)");
    }
    const int launched = comm::launched_process_count();
    const int workers = launched - c.ps_shards;
    if (c.ps_shards < 1 || workers < 1) {
      TANDEM_THROW(InvalidArgument, "--ps ", c.ps_shards, " with mpirun -np ", launched,
                   ": ranks 0..", c.ps_shards - 1,
                   " would hold the parameter-server shards "
                   "and leave no worker (start more processes or give a smaller --ps)");
    }
    // Every rank checks the workers' layout, rank 0 too: a decision only
    // the workers took would leave rank 0 waiting for them.
    const int threads =
        c.threads_per_device > 0 ? c.threads_per_device : std::max(1, cores / processes_here);
    check_subscription(c, processes_here, 1, threads, cores);
    if (comm::launched_rank() == 0) {
      // Stand-ins for the workers: they hold values, and compute only when
      // the chief evaluates.
      return {.local_replicas = workers,
              .global_replicas = workers,
              .threads_per_replica = 1,
              .host_replicas = processes_here};
    }
    return {.local_replicas = 1,
            .global_replicas = workers,
            .threads_per_replica = threads,
            .host_replicas = processes_here};
  }
  if (c.kind == StrategyKind::multi_worker) {
    if (comm::launcher() == comm::Launcher::none) {
      TANDEM_THROW(InvalidArgument,
                   "strategy multi_worker needs its processes started by mpirun or tandem launch "
                   "(e.g. tandem launch --nproc-per-node 2 -- tandem train --strategy "
                   "multi-worker)");
    }
    processes = c.processes ? c.processes->size() : std::max(1, comm::launched_process_count());
  }
  const int cores_here = std::max(1, cores / processes_here);
  const int devices = c.devices > 0 ? c.devices : cores_here;
  const int threads =
      c.threads_per_device > 0 ? c.threads_per_device : std::max(1, cores_here / devices);
  check_subscription(c, processes_here, devices, threads, cores);
  return {.local_replicas = devices,
          .global_replicas = devices * processes,
          .threads_per_replica = threads,
          .host_replicas = devices * processes_here};
}

std::unique_ptr<Strategy> make_strategy(const StrategyConfig& c) {
  const StrategyLayout layout = strategy_layout(c);
  if (c.kind == StrategyKind::one_device && c.device_kind == DeviceKind::cuda) {
    return std::make_unique<OneDevice>(ReplicaContext{.device = Device{DeviceKind::cuda, 0},
                                                      .threads = layout.threads_per_replica});
  }
  if (c.kind == StrategyKind::one_device)
    return std::make_unique<OneDevice>(layout.threads_per_replica);
  if (c.kind == StrategyKind::mirrored && c.device_kind == DeviceKind::cuda) {
    const int gpus = cuda_gpu_count();
    // One replica per GPU all-reduces with NCCL; more replicas than GPUs
    // split each GPU into virtual devices, which NCCL cannot serve: the
    // in-process collectives over device memory do.
    if (layout.local_replicas > gpus) set_cuda_devices_per_gpu(layout.local_replicas / gpus);
    if (layout.local_replicas > 1 && layout.local_replicas <= gpus && comm::nccl_available()) {
      return std::make_unique<MirroredNccl>(layout.local_replicas, layout.threads_per_replica,
                                            c.comm);
    }
    return std::make_unique<Mirrored>(layout.local_replicas, layout.threads_per_replica, c.comm,
                                      DeviceKind::cuda);
  }
  if (c.kind == StrategyKind::mirrored) {
    return std::make_unique<Mirrored>(layout.local_replicas, layout.threads_per_replica, c.comm);
  }
  if (c.kind == StrategyKind::parameter_server && parameter_server_across_processes()) {
    const double silence = std::chrono::duration<double>(c.comm.peer_timeout).count();
    const int rank = comm::mpi_world_rank();
    const int workers = layout.global_replicas;
    if (rank == 0) {
      return std::make_unique<ParameterServer>(
          layout.local_replicas, layout.threads_per_replica, c.comm,
          accept_remote_workers(workers, c.ps_shards, silence));
    }
    if (rank < c.ps_shards) {
      return std::make_unique<ParameterServerShardRank>(rank, layout.threads_per_replica, workers,
                                                        accept_shard_clients(c.ps_shards, workers),
                                                        silence);
    }
    return std::make_unique<ParameterServerWorker>(
        rank, c.ps_shards, layout.threads_per_replica, workers,
        connect_to_parameter_servers(c.ps_shards), silence);
  }
  if (c.kind == StrategyKind::parameter_server) {
    return std::make_unique<ParameterServer>(layout.local_replicas, layout.threads_per_replica,
                                             c.comm);
  }
  if (c.device_kind == DeviceKind::cuda) {
    if (c.processes) {
      TANDEM_THROW(NotImplemented,
                   "elastic multi_worker runs on CPUs: its NCCL communicator is not rebuilt "
                   "over a new membership yet");
    }
    return std::make_unique<MultiWorkerNccl>(layout.threads_per_replica, c.comm);
  }
  return std::make_unique<MultiWorker>(layout.local_replicas, layout.threads_per_replica, c.comm,
                                       c.processes);
}

}  // namespace tandem::distribute
