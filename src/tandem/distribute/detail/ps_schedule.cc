#include "tandem/distribute/detail/ps_schedule.h"

#include <algorithm>
#include <utility>

#include "tandem/base/error.h"
#include "tandem/data/distribute.h"
#include "tandem/distribute/detail/engine_parts.h"

namespace tandem::distribute::detail {

ParameterServerSchedule::ParameterServerSchedule(int workers, std::optional<int64_t> max_staleness,
                                                 int backup_workers)
    : max_staleness_(max_staleness), backup_workers_(backup_workers) {
  if (workers < 1) TANDEM_THROW(InvalidArgument, "a parameter server needs a worker");
  workers_.resize(static_cast<size_t>(workers));
}

ParameterServerSchedule::Worker& ParameterServerSchedule::at(int worker) {
  return const_cast<Worker&>(std::as_const(*this).at(worker));
}

const ParameterServerSchedule::Worker& ParameterServerSchedule::at(int worker) const {
  if (worker < 0 || worker >= workers())
    TANDEM_THROW(InvalidArgument, "no parameter-server worker ", worker, " of ", workers());
  return workers_[static_cast<size_t>(worker)];
}

int ParameterServerSchedule::live_workers() const {
  return static_cast<int>(
      std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return !w.lost; }));
}

void ParameterServerSchedule::hand_out(const data::Element& batch, int64_t step,
                                       int64_t global_rows, std::optional<double> learning_rate,
                                       std::shared_ptr<const ForwardFn> forward) {
  // One share per live worker (a lost worker's would be lost too).
  const std::vector<data::Element> parts = data::split_batch(batch, live_workers());
  const int64_t round = rounds_++;
  size_t part = 0;
  for (Worker& w : workers_) {
    if (w.lost) continue;
    Share share{parts[part++], round, step, global_rows, learning_rate, forward};
    (synchronous() ? w.queue : shared_queue_).push_back(std::move(share));
  }
  drop_stale_shares();
}

void ParameterServerSchedule::drop_stale_shares() {
  // Shares of rounds already applied (backup workers: a slow worker's
  // backlog) can no longer join their round.
  for (Worker& w : workers_) {
    while (!w.queue.empty() && w.queue.front().round < version_) {
      w.dropped += rows_of(w.queue.front().rows);
      w.queue.pop_front();
    }
  }
}

bool ParameterServerSchedule::has_room() const {
  if (!synchronous()) return shared_queue_.size() <= static_cast<size_t>(live_workers());
  for (const Worker& w : workers_)
    if (!w.lost && w.queue.size() <= 1) return true;
  return false;
}

bool ParameterServerSchedule::admitted() const {
  // Each computing worker lands at most one more update before this one.
  if (!max_staleness_) return true;
  int64_t computing = 0, oldest = version_;
  for (const Worker& w : workers_) {
    if (!w.computing_on) continue;
    ++computing;
    oldest = std::min(oldest, *w.computing_on);
  }
  return computing == 0 || version_ - oldest + computing <= *max_staleness_;
}

ParameterServerSchedule::Next ParameterServerSchedule::next(int worker, bool closing) {
  Worker& w = at(worker);
  Next next;
  const auto compute = [&](Share share) {
    w.computing_on = version_;
    next.kind = Next::Kind::compute;
    next.share = std::move(share);
    return next;
  };
  if (w.lost) {
    next.kind = Next::Kind::stop;
    return next;
  }
  if (!synchronous()) {
    for (;;) {
      if (shared_queue_.empty()) {
        if (closing) next.kind = Next::Kind::stop;
        return next;
      }
      if (!admitted()) return next;
      Share share = std::move(shared_queue_.front());
      shared_queue_.pop_front();
      next.changed = true;
      if (rows_of(share.rows) != 0) return compute(std::move(share));
    }
  }
  for (;;) {
    if (!w.waiting) {
      if (w.queue.empty()) {
        if (closing) next.kind = Next::Kind::stop;
        return next;
      }
      w.waiting = std::move(w.queue.front());
      w.queue.pop_front();
      next.changed = true;
    }
    // A share joins its round once the one before it is applied; a round
    // applied without this worker (backup workers) is gone.
    if (version_ < w.waiting->round) return next;
    if (version_ == w.waiting->round) return compute(*std::exchange(w.waiting, std::nullopt));
    w.dropped += rows_of(w.waiting->rows);
    w.waiting.reset();
  }
}

void ParameterServerSchedule::count_staleness(int64_t staleness, int64_t gradients) {
  if (staleness_.size() <= static_cast<size_t>(staleness))
    staleness_.resize(static_cast<size_t>(staleness) + 1, 0);
  staleness_[static_cast<size_t>(staleness)] += gradients;
}

int64_t ParameterServerSchedule::arrive_asynchronous(int worker, bool finite) {
  Worker& w = at(worker);
  if (!w.computing_on)
    TANDEM_THROW(Error, "parameter-server worker ", worker, " arrived without computing");
  const int64_t staleness = version_ - *std::exchange(w.computing_on, std::nullopt);
  if (!finite) {
    ++updates_.rejected;
    return staleness;
  }
  ++updates_.applied;
  ++version_;
  count_staleness(staleness, 1);
  return staleness;
}

ParameterServerSchedule::RoundArrival ParameterServerSchedule::arrive_in_round(
    int worker, const Share& share, int64_t rows, bool finite, ShareId id) {
  Worker& w = at(worker);
  w.computing_on.reset();
  RoundArrival arrival;
  if (version_ != share.round) {
    w.dropped += rows;
    arrival.late = true;
    return arrival;
  }
  if (arrivals_ == 0) {
    arrival.first = true;
    round_rows_ = 0;
    round_finite_ = true;
    round_global_rows_ = share.global_rows;
    round_learning_rate_ = share.learning_rate;
  }
  round_finite_ = round_finite_ && finite;
  round_rows_ += rows;
  (finite ? round_sources_ : round_discards_).push_back(id);
  ++arrivals_;
  return arrival;
}

std::optional<ParameterServerSchedule::CompletedRound> ParameterServerSchedule::complete_round() {
  if (arrivals_ == 0 || arrivals_ < std::max(1, live_workers() - backup_workers_))
    return std::nullopt;
  CompletedRound round;
  round.finite = round_finite_;
  round.learning_rate = round_learning_rate_;
  round.update = {.advance = true,
                  .sources = std::exchange(round_sources_, {}),
                  .discards = std::exchange(round_discards_, {})};
  if (round_finite_ && round_rows_ > 0) {
    // Each gradient was divided by the whole batch's rows.
    if (round_rows_ != round_global_rows_) {
      round.factor = static_cast<float>(static_cast<double>(round_global_rows_) /
                                        static_cast<double>(round_rows_));
      round.update.factor = round.factor;
    }
    round.apply = true;
    ++updates_.applied;
    count_staleness(0, arrivals_);
  } else {
    if (!round_finite_) ++updates_.rejected;
    // The version moves on without an update: the shard ranks' too.
    auto& u = round.update;
    u.discards.insert(u.discards.end(), u.sources.begin(), u.sources.end());
    u.sources.clear();
  }
  arrivals_ = 0;
  ++version_;
  return round;
}

bool ParameterServerSchedule::lose(int worker, std::optional<Share> held) {
  Worker& w = at(worker);
  w.lost = true;
  w.computing_on.reset();
  const bool round_waits = synchronous() && held && version_ == held->round && arrivals_ > 0;
  if (held && !synchronous()) {
    shared_queue_.push_front(std::move(*held));  // another worker takes it
  } else if (held) {
    w.dropped += rows_of(held->rows);
  }
  if (w.waiting) w.dropped += rows_of(w.waiting->rows);
  w.waiting.reset();
  for (const Share& queued : w.queue) w.dropped += rows_of(queued.rows);
  w.queue.clear();
  return round_waits;
}

std::vector<int64_t> ParameterServerSchedule::take_dropped() {
  std::vector<int64_t> dropped;
  for (Worker& w : workers_) dropped.push_back(std::exchange(w.dropped, 0));
  return dropped;
}

std::vector<int64_t> ParameterServerSchedule::take_staleness() {
  return std::exchange(staleness_, {});
}

ParameterServerSchedule::Updates ParameterServerSchedule::take_updates() {
  return std::exchange(updates_, {});
}

}  // namespace tandem::distribute::detail
