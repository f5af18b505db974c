#include "tandem/distribute/strategy.h"

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/comm/hierarchical.h"
#include "tandem/comm/inprocess.h"
#include "tandem/comm/mpi.h"

namespace tandem::distribute {
namespace {

// Sums over the replicas through the replica's communicator (synchronous).
class CommSum : public CrossReplicaSum {
 public:
  explicit CommSum(comm::Communicator* comm) : comm_(comm) {}
  void sum(Tensor& values) override {
    if (comm_) comm_->all_reduce(values, comm::ReduceOp::sum);
  }

 private:
  comm::Communicator* comm_;
};

class OneDevice : public Strategy {
 public:
  explicit OneDevice(int threads) : threads_(threads) {}
  std::string name() const override { return "one_device"; }
  int local_replicas() const override { return 1; }
  int global_replicas() const override { return 1; }
  int first_replica() const override { return 0; }
  comm::Communicator* communicator(int) override { return nullptr; }
  int threads_per_replica() const override { return threads_; }
  Device device(int) const override { return cpu_device(); }
  void run(const std::function<void(int)>& fn) override {
    const int saved = num_threads();
    set_num_threads(threads_);
    try {
      fn(0);
    } catch (...) {
      set_num_threads(saved);
      throw;
    }
    set_num_threads(saved);
  }

 private:
  int threads_;
};

// Persistent replica threads, each taking one task per step.
class ReplicaThreads {
 public:
  ReplicaThreads(int count, int threads_per_replica, std::vector<comm::Communicator*> comms)
      : comms_(std::move(comms)) {
    for (int r = 0; r < count; ++r) {
      threads_.emplace_back([this, r, threads_per_replica] { loop(r, threads_per_replica); });
    }
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
    cv_.notify_all();
    done_cv_.wait(lock, [this] { return remaining_ == 0; });
    task_ = nullptr;
    if (first_error_) std::rethrow_exception(first_error_);
  }

 private:
  void loop(int r, int threads_per_replica) {
    set_num_threads(threads_per_replica);
    DeviceScope device(cpu_device(r));
    CommSum sum(comms_[r]);
    CrossReplicaScope scope(&sum);
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      const std::function<void(int)>* task = task_;
      lock.unlock();
      std::exception_ptr error;
      try {
        (*task)(r);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (error && !first_error_) first_error_ = error;
      if (--remaining_ == 0) done_cv_.notify_all();
    }
  }

  std::vector<comm::Communicator*> comms_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* task_ = nullptr;
  uint64_t generation_ = 0;
  int remaining_ = 0;
  bool stopping_ = false;
  std::exception_ptr first_error_;
};

// Replicas on threads of this process, each with its communicator from a
// group (in-process or hierarchical) that the strategy keeps alive.
template <typename Group>
class ThreadedStrategy : public Strategy {
 public:
  ThreadedStrategy(std::unique_ptr<Group> group, int devices, int threads)
      : threads_(threads), group_(std::move(group)) {
    std::vector<comm::Communicator*> raw;
    for (int r = 0; r < devices; ++r) {
      comms_.push_back(group_->communicator(r));
      raw.push_back(comms_.back().get());
    }
    replicas_ = std::make_unique<ReplicaThreads>(devices, threads, raw);
  }
  ~ThreadedStrategy() override {
    replicas_.reset();  // threads first: they use the communicators
  }
  int local_replicas() const override { return static_cast<int>(comms_.size()); }
  comm::Communicator* communicator(int r) override { return comms_.at(r).get(); }
  int threads_per_replica() const override { return threads_; }
  Device device(int local_replica) const override { return cpu_device(local_replica); }
  void run(const std::function<void(int)>& fn) override { replicas_->run(fn); }

 protected:
  const Group& group() const { return *group_; }

 private:
  int threads_;
  std::unique_ptr<Group> group_;
  std::vector<std::unique_ptr<comm::Communicator>> comms_;
  std::unique_ptr<ReplicaThreads> replicas_;
};

class Mirrored : public ThreadedStrategy<comm::InProcessGroup> {
 public:
  Mirrored(int devices, int threads, const comm::CommOptions& options)
      : ThreadedStrategy(std::make_unique<comm::InProcessGroup>(
                             devices, comm::InProcessOptions{.comm = options}),
                         devices, threads) {}
  std::string name() const override { return "mirrored"; }
  int global_replicas() const override { return local_replicas(); }
  int first_replica() const override { return 0; }
};

class MultiWorker : public ThreadedStrategy<comm::HierarchicalGroup> {
 public:
  MultiWorker(int devices, int threads, const comm::CommOptions& options)
      : ThreadedStrategy(std::make_unique<comm::HierarchicalGroup>(devices, options), devices,
                         threads) {}
  std::string name() const override { return "multi_worker"; }
  int global_replicas() const override { return group().local_size() * group().process_count(); }
  int first_replica() const override { return group().process_rank() * group().local_size(); }
};

}  // namespace

std::unique_ptr<Strategy> make_strategy(const StrategyConfig& c) {
  const int cores = std::max(1, cpu_info().physical_cores);
  if (c.devices < 0 || c.threads_per_device < 0) {
    TANDEM_THROW(InvalidArgument, "devices and threads per device must be positive, got ",
                 c.devices, " and ", c.threads_per_device);
  }
  if (c.name == "one_device") {
    if (c.devices > 1) {
      TANDEM_THROW(InvalidArgument, "strategy one_device runs one replica; got ", c.devices,
                   " devices (use --strategy mirrored)");
    }
    return std::make_unique<OneDevice>(c.threads_per_device > 0 ? c.threads_per_device : cores);
  }
  if (c.name != "mirrored" && c.name != "multi_worker") {
    TANDEM_THROW(InvalidArgument, "unknown strategy '", c.name,
                 "' (expected one_device, mirrored or multi_worker)");
  }
  // Processes of this job on this host share its cores (multi_worker under mpirun).
  int processes_here = 1;
  if (c.name == "multi_worker") {
    for (const char* variable : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
      if (const char* value = std::getenv(variable)) processes_here = std::max(1, std::atoi(value));
    }
  }
  const int cores_here = std::max(1, cores / processes_here);
  const int devices = c.devices > 0 ? c.devices : cores_here;
  const int threads =
      c.threads_per_device > 0 ? c.threads_per_device : std::max(1, cores_here / devices);
  if (devices * threads * processes_here > cores && !c.allow_oversubscription) {
    TANDEM_THROW(
        InvalidArgument, processes_here > 1 ? std::to_string(processes_here) + " processes x " : "",
        devices, " device(s) x ", threads, " thread(s) need ", devices * threads * processes_here,
        " cores but this machine has ", cores,
        " physical cores (replicas would slow each other down; set allow_oversubscription, "
        "--allow-oversubscription on the command line, to do it anyway)");
  }
  if (c.name == "mirrored") return std::make_unique<Mirrored>(devices, threads, c.comm);
  if (!comm::launched_by_mpi()) {
    TANDEM_THROW(InvalidArgument,
                 "strategy multi_worker needs its processes started by mpirun "
                 "(e.g. mpirun -np 2 tandem train --strategy multi-worker)");
  }
  return std::make_unique<MultiWorker>(devices, threads, c.comm);
}

}  // namespace tandem::distribute
