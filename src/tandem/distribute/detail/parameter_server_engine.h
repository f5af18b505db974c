#pragma once
// The parameter-server engine (make_parameter_server_engine,
// parameter_server.h), private to distribute. Its parts, one concept per
// file:
//   parameter_server_engine.cc  handing out work, the workers' loop on the
//                               strategy's replica threads (or one thread per
//                               worker process), staging and applying
//                               gradients behind one lock
//   detail/ps_schedule.h        who computes what when (no threads, no tensors)
//   parameter_server_remote.cc  the worker processes and shard ranks seen from
//                               the chief: their messages, and stopping them
//   parameter_server_state.cc   save_state/load_state: the shards' optimizer
//                               state under the replicated optimizer's names

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tandem/distribute/detail/engine_parts.h"
#include "tandem/distribute/detail/ps_messages.h"
#include "tandem/distribute/detail/ps_schedule.h"
#include "tandem/distribute/detail/worker_link.h"
#include "tandem/distribute/parameter_server.h"
#include "tandem/distribute/parameter_server_processes.h"
#include "tandem/distribute/variable_partition.h"
#include "tandem/optim/optimizer.h"
#include "tandem/precision/loss_scaler.h"

namespace tandem::distribute::detail {

using Clock = std::chrono::steady_clock;

// What a worker's forward and backward produced, how long they took, and
// (a remote worker's) the caller's sums that came with it.
struct Gradient : detail::WorkerGradient {
  std::vector<double> reports;
  double wire_seconds = 0.0;          // a remote worker's: the round trip less its compute
  int64_t share = 0;                  // a remote worker's count: names its gradient on shard ranks
  std::vector<double> shard_squares;  // a remote worker's, per shard, with clipping
};

class ParameterServerEngine : public Engine {
 public:
  ParameterServerEngine(Strategy& strategy, const ModelBuilder& build, const EngineOptions& options,
                        std::shared_ptr<RemoteWorkers> remote);
  ~ParameterServerEngine() override;

  std::string name() const override { return "parameter_server"; }
  nn::Module& model(int local_replica) override { return *workers_.at(local_replica).model; }
  // Every shard's optimizer has the same settings; the first (always in
  // this process) stands for them.
  optim::Optimizer& optimizer(int) override { return *shards_.front().optimizer; }
  const precision::LossScaler* loss_scaler() const override { return scaler_.get(); }

  StepResult step(const data::Element& batch, const ForwardFn& forward,
                  const StepOptions& options) override;
  StepResult synchronize() override;
  void evaluate(const data::Element& batch, const EvaluateFn& fn) override;
  EngineState save_state() override;
  void load_state(const EngineState& state) override;

 private:
  struct Worker {
    std::shared_ptr<nn::Module> model;
    std::vector<Variable> parameters;
    ReplicaContext context;                         // the strategy's, without its communicator
    std::unique_ptr<precision::LossScaler> scaler;  // the server's, as of the last pull
    int64_t shares = 0;                             // shares handed to a remote worker
    bool silent = false;  // given up for its silence: its process may still exist
    // Since the engine last reported; under the lock, like every field the
    // main thread reads while the worker runs.
    double loss_sum = 0.0;
    int64_t rows = 0;
    ReplicaStepTime times;
    std::vector<double> reports;  // a remote worker's sums (StepResult::replica_reports)
  };
  struct Shard {
    std::vector<size_t> pieces;   // indices into pieces_
    std::vector<Variable> views;  // each piece's rows of its variable, gradient included
    std::unique_ptr<optim::Optimizer> optimizer;  // null on a shard rank's shard
    // A shard kept by another process (a shard rank across processes):
    // its optimizer and the master values are there; the views here hold
    // the values as of the last fetch_remote_values().
    detail::WorkerLink* link = nullptr;
  };

  bool synchronous() const { return schedule_.synchronous(); }
  int workers() const { return static_cast<int>(workers_.size()); }
  void start_workers();
  // Lets the workers finish the work handed out, joins them, and puts the
  // latest parameters into every worker; rethrows a worker's error.
  void drain();
  void worker_loop(int r);
  // The next share for worker r, waiting until there is one; none when it is done.
  std::optional<Share> take_work(int r, std::unique_lock<std::mutex>& lock);
  // The server's values (and loss scale) into a worker's copy: every
  // variable, or only those with a piece on a shard in this process (what a
  // share needs here: the shard ranks serve the rest).
  void pull(Worker& w, bool held_here_only = false);
  int64_t divisor(const Share& work) const;
  Gradient compute(Worker& w, const Share& work);
  Gradient compute_remote(int r, Worker& w, const Share& work, int64_t version);
  void lose_worker(int r, std::optional<Share> work, const std::string& why);
  void push_asynchronous(int r, const Share& work, const Gradient& g);
  void push_to_round(int r, const Share& work, const Gradient& g);
  void finish_round_if_complete();
  void stage(const Worker& w, bool add);
  // Applies the staged gradient here and has the shard ranks apply
  // `update` (its sources: the same gradients); `worker_squares`, when
  // given, are the one gradient's squared norms per shard (for clipping).
  void apply(double learning_rate, detail::ShardUpdate update,
             const std::vector<double>* worker_squares = nullptr);
  bool remote_shards() const { return shards_.size() > 1 && shards_.back().link != nullptr; }
  void tell_shards(const detail::ShardUpdate& update);
  // The shard ranks' values into server_ (after a drain).
  void fetch_remote_values();
  // A shard's optimizer state under its own names (for a shard rank's, a copy).
  std::vector<std::pair<std::string, Tensor>> shard_state(Shard& shard);
  // Shard rank k's values from server_, and its optimizer state; waits
  // until it has them (a worker's pull must not overtake them).
  void load_shard_rank(int k, const std::vector<std::pair<std::string, Tensor>>& state);
  StepResult take_results(Clock::time_point since);
  void rethrow_if_failed();

  EngineOptions options_;
  ParameterServerOptions ps_;
  std::shared_ptr<RemoteWorkers> remote_;  // workers in other processes, or null
  std::vector<Worker> workers_;            // never resized once built: threads hold references
  // The master variables, whole (the shards' views share their values), and
  // the staged gradient of the update being applied.
  std::vector<Variable> server_;
  std::vector<bool> staged_;
  std::vector<bool> held_here_;  // per variable: a piece of it on a shard of this process
  std::vector<VariablePiece> pieces_;
  std::vector<Shard> shards_;
  std::unique_ptr<precision::LossScaler> scaler_;

  std::mutex mutex_;
  std::condition_variable changed_;
  detail::ParameterServerSchedule schedule_;  // under mutex_
  std::atomic<int64_t> handed_out_{0};  // shares sent to remote workers (the fault-injection hook)
  bool closing_ = false, failed_ = false;
  std::exception_ptr error_;
  std::thread runner_;
};

}  // namespace tandem::distribute::detail
