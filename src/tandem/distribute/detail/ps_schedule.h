#pragma once
// The parameter-server engine's schedule, with no threads, tensors or
// links: which worker computes which share of which batch, when a worker
// may start (bounded staleness), when a synchronous round is complete
// (backup workers), what becomes of a late gradient and of a lost worker's
// shares, and the counts a step reports. The engine
// (parameter_server_engine.cc) calls it under its lock and waits for a
// change whenever it says wait; tests drive it with scripted arrivals.

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "tandem/distribute/detail/ps_messages.h"
#include "tandem/distribute/engine.h"

namespace tandem::distribute::detail {

// One worker's share of one batch.
struct Share {
  data::Element rows;
  int64_t round = 0;  // the batch's index since the engine was built
  int64_t step = 0;   // StepOptions::step: seeds the random streams
  int64_t global_rows = 0;
  std::optional<double> learning_rate;
  std::shared_ptr<const ForwardFn> forward;
};

class ParameterServerSchedule {
 public:
  // max_staleness: none for no bound, 0 for synchronous rounds.
  ParameterServerSchedule(int workers, std::optional<int64_t> max_staleness, int backup_workers);

  bool synchronous() const { return max_staleness_ && *max_staleness_ == 0; }
  int workers() const { return static_cast<int>(workers_.size()); }
  int live_workers() const;
  bool lost(int worker) const { return at(worker).lost; }
  // Updates applied (rounds completed, when synchronous).
  int64_t version() const { return version_; }

  // A batch: one share per live worker, in worker order (call it only with
  // a live worker). Shares of rounds already complete are dropped.
  void hand_out(const data::Element& batch, int64_t step, int64_t global_rows,
                std::optional<double> learning_rate, std::shared_ptr<const ForwardFn> forward);
  // Enough handed out that the first worker to be free finds work, and no more.
  bool has_room() const;

  struct Next {
    enum class Kind { wait, compute, stop } kind = Kind::wait;
    std::optional<Share> share;  // compute: the share
    bool changed = false;        // shares moved (has_room may hold now): wake the others
  };
  // What worker r does now: compute a share at version() (recorded as the
  // version it computes on), wait for a change, or stop (lost, or nothing
  // left while closing). Asynchronous shares without rows are skipped.
  Next next(int worker, bool closing);
  // The version worker r computes on, while it does.
  std::optional<int64_t> computing_on(int worker) const { return at(worker).computing_on; }
  // Worker r stopped computing without a gradient (its error ends the job).
  void abandon(int worker) { at(worker).computing_on.reset(); }

  // Worker r's asynchronous gradient: counted as applied (the engine applies
  // it) when finite, else rejected. Returns its staleness: the updates
  // applied since the version it computed on.
  int64_t arrive_asynchronous(int worker, bool finite);

  // Worker r's gradient of `rows` rows for a synchronous round, named `id`
  // on the shard ranks. Late: its round was completed without it (the
  // engine discards it). Otherwise the engine stages it, after clearing what
  // was staged when it is the round's first.
  struct RoundArrival {
    bool late = false;
    bool first = false;
  };
  RoundArrival arrive_in_round(int worker, const Share& share, int64_t rows, bool finite,
                               ShareId id);
  // The current round, once the live workers less the backup workers have
  // arrived; the version moves on.
  struct CompletedRound {
    bool apply = false;   // every arrival finite, with rows: apply the staged sum
    bool finite = true;   // for the loss scaler
    float factor = 1.0f;  // the staged sum times this is the mean over the rows that arrived
    std::optional<double> learning_rate;  // the round's StepOptions::learning_rate
    ShardUpdate update;                   // advance, sources, discards, factor
  };
  std::optional<CompletedRound> complete_round();

  // Worker r is gone: the share it held (when given) goes to another
  // worker (asynchronous) or is dropped, and so is its queue. True when
  // the current round may be complete without it (call complete_round).
  bool lose(int worker, std::optional<Share> held);

  // Since the last take: each worker's rows dropped (late or lost shares),
  // the staleness histogram of applied gradients, updates applied and
  // rejected (not finite).
  std::vector<int64_t> take_dropped();
  std::vector<int64_t> take_staleness();
  struct Updates {
    int64_t applied = 0, rejected = 0;
  };
  Updates take_updates();

 private:
  struct Worker {
    std::deque<Share> queue;       // synchronous: this worker's shares
    std::optional<Share> waiting;  // synchronous: taken, waiting for its round to start
    std::optional<int64_t> computing_on;
    bool lost = false;
    int64_t dropped = 0;
  };
  Worker& at(int worker);
  const Worker& at(int worker) const;
  // Bounded staleness: with one more worker computing, every gradient in
  // flight is still within the bound when it lands.
  bool admitted() const;
  void drop_stale_shares();
  void count_staleness(int64_t staleness, int64_t gradients);

  std::optional<int64_t> max_staleness_;
  int backup_workers_ = 0;
  std::vector<Worker> workers_;
  std::deque<Share> shared_queue_;  // asynchronous: the next share goes to whoever is free
  int64_t version_ = 0;
  int64_t rounds_ = 0;  // batches handed out
  // The synchronous round being gathered.
  int arrivals_ = 0;
  int64_t round_rows_ = 0, round_global_rows_ = 0;
  bool round_finite_ = true;
  std::optional<double> round_learning_rate_;
  std::vector<ShareId> round_sources_, round_discards_;
  std::vector<int64_t> staleness_;
  Updates updates_;
};

}  // namespace tandem::distribute::detail
