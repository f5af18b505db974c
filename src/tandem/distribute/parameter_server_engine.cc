// The parameter-server engine (detail/parameter_server_engine.h): workers on
// the strategy's replica threads (or one thread per worker process), driven
// by one background call of Strategy::run for as long as step() keeps handing
// out work as the schedule says; gradients staged and applied to the shards
// of master parameters and optimizer state behind one lock.
#include "tandem/distribute/detail/parameter_server_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tandem/base/error.h"
#include "tandem/base/trace.h"
#include "tandem/base/warnings.h"
#include "tandem/distribute/strategy.h"
#include "tandem/kernels/elementwise.h"

namespace tandem::distribute {
namespace detail {

ParameterServerEngine::ParameterServerEngine(Strategy& strategy, const ModelBuilder& build,
                                             const EngineOptions& options,
                                             std::shared_ptr<RemoteWorkers> remote)
    : Engine(strategy),
      options_(options),
      ps_(options.parameter_server),
      remote_(std::move(remote)),
      schedule_(std::max(strategy.local_replicas(), 1), ps_.max_staleness, ps_.backup_workers) {
  if (!build) TANDEM_THROW(InvalidArgument, "an engine needs a model builder");
  check_engine_options(options, strategy.global_replicas());
  if (strategy.global_replicas() != strategy.local_replicas()) {
    TANDEM_THROW(InvalidArgument,
                 "the parameter-server engine's workers are this process's replicas or, on "
                 "the server rank, the worker processes");
  }
  if (remote_ && remote_->links.size() != static_cast<size_t>(strategy.local_replicas())) {
    TANDEM_THROW(InvalidArgument, "the parameter server has ", remote_->links.size(),
                 " worker processes for ", strategy.local_replicas(), " replicas");
  }
  if (options.accumulation_steps != 1) {
    TANDEM_THROW(InvalidArgument,
                 "gradient accumulation (--accumulate) does not apply to the "
                 "parameter-server strategy: each worker pushes the gradient of its own rows");
  }
  if (options.reducer.zero_stage != 0 || options.sync_every != 0) {
    TANDEM_THROW(InvalidArgument,
                 "ZeRO (--zero) and local SGD (--sync-every) are all-reduce "
                 "settings; the parameter-server strategy keeps the optimizer on its shards");
  }
  optim::check_optimizer_config(options.optimizer);
  workers_.resize(static_cast<size_t>(strategy.local_replicas()));
  for (int r = 0; r < workers(); ++r) {
    Worker& w = workers_[r];
    DeviceScope device(strategy.device(r));
    w.model = build();
    if (!w.model) TANDEM_THROW(InvalidArgument, "the model builder returned no model");
    w.parameters = w.model->parameters();
    w.context = strategy.replica_context(r);
    w.context.communicator = nullptr;
    if (options.loss_scale) w.scaler = std::make_unique<precision::LossScaler>(*options.loss_scale);
    const std::vector<Variable>& first = workers_.front().parameters;
    bool same = w.parameters.size() == first.size();
    for (size_t i = 0; same && i < first.size(); ++i)
      same = w.parameters[i].shape() == first[i].shape();
    if (!same) {
      TANDEM_THROW(InvalidArgument, "workers were built with different models: worker ", r,
                   " differs from worker 0 (every worker must build the same architecture)");
    }
  }
  if (options.loss_scale) scaler_ = std::make_unique<precision::LossScaler>(*options.loss_scale);
  // The server starts from worker 0's initial weights.
  for (const Variable& p : workers_.front().parameters) {
    DeviceScope device(strategy.device(0));
    MemoryCategoryScope category(MemoryCategory::parameters);
    Variable master(p.value().clone(), true);
    master.set_grad_buffer(
        Tensor::zeros(p.shape(), DType::f32, p.value().device(), MemoryCategory::gradients));
    server_.push_back(master);
  }
  staged_.assign(server_.size(), false);
  pieces_ = detail::server_pieces(server_, options);
  shards_.resize(static_cast<size_t>(ps_.shards));
  const size_t shard_ranks = remote_ ? remote_->shard_links.size() : 0;
  if (shard_ranks != 0 && shard_ranks + 1 != shards_.size()) {
    TANDEM_THROW(InvalidArgument, "the parameter server has ", shard_ranks + 1, " shard ranks for ",
                 shards_.size(), " shards");
  }
  for (size_t k = 0; k < shards_.size(); ++k) {
    Shard& shard = shards_[k];
    shard.views = detail::shard_views(server_, pieces_, static_cast<int>(k), &shard.pieces);
    if (k > 0 && shard_ranks != 0) {
      // The shard rank's first values: this process's, like every worker's.
      shard.link = remote_->shard_links[k - 1].get();
      load_shard_rank(static_cast<int>(k), {});
      continue;
    }
    MemoryCategoryScope category(MemoryCategory::optimizer_state);
    shard.optimizer = optim::make_optimizer(options.optimizer, shard.views);
  }
  held_here_.assign(server_.size(), false);
  for (const VariablePiece& piece : pieces_)
    if (!shards_[static_cast<size_t>(piece.shard)].link) held_here_[piece.variable] = true;
  for (Worker& w : workers_) pull(w);
}

void ParameterServerEngine::start_workers() {
  if (runner_.joinable()) return;
  runner_ = std::thread([this] {
    try {
      if (remote_) {
        // One thread per worker process: it sends the work and waits for
        // the gradient, which the replica thread would compute in process.
        std::vector<std::thread> threads;
        std::vector<std::exception_ptr> errors(workers_.size());
        for (int r = 0; r < workers(); ++r) {
          threads.emplace_back([this, r, &errors] {
            try {
              worker_loop(r);
            } catch (...) {
              errors[static_cast<size_t>(r)] = std::current_exception();
            }
          });
        }
        for (std::thread& t : threads) t.join();
        for (const std::exception_ptr& e : errors)
          if (e) std::rethrow_exception(e);
      } else {
        strategy().run([this](int r) { worker_loop(r); });
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
      failed_ = true;
      changed_.notify_all();
    }
  });
}

void ParameterServerEngine::rethrow_if_failed() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failed_) return;
  }
  // The failing worker's error reaches error_ once every worker has left.
  if (runner_.joinable()) runner_.join();
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error = error_;
  }
  if (error) std::rethrow_exception(error);
  TANDEM_THROW(Error, "the parameter-server workers stopped");
}

void ParameterServerEngine::drain() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  changed_.notify_all();
  if (runner_.joinable()) runner_.join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = false;
  }
  rethrow_if_failed();
  std::lock_guard<std::mutex> lock(mutex_);
  fetch_remote_values();
  for (Worker& w : workers_) pull(w);
}

StepResult ParameterServerEngine::step(const data::Element& batch, const ForwardFn& forward,
                                       const StepOptions& options) {
  if (batch.size() == 0) TANDEM_THROW(InvalidArgument, "a step needs a batch with features");
  if (!forward) TANDEM_THROW(InvalidArgument, "a step needs a forward function");
  rethrow_if_failed();
  const auto start = Clock::now();
  const int64_t global_rows = options.global_rows >= 0 ? options.global_rows : rows_of(batch);
  if (global_rows < 1) {
    TANDEM_THROW(InvalidArgument, "a step needs at least one row in the global batch, got ",
                 global_rows);
  }
  const auto fn = std::make_shared<const ForwardFn>(forward);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (schedule_.live_workers() == 0) {
      failed_ = true;
    } else {
      schedule_.hand_out(batch, options.step, global_rows, options.learning_rate, fn);
    }
  }
  changed_.notify_all();
  start_workers();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return failed_ || schedule_.has_room(); });
  if (failed_) {
    lock.unlock();
    rethrow_if_failed();
  }
  return take_results(start);
}

StepResult ParameterServerEngine::synchronize() {
  const auto start = Clock::now();
  drain();
  std::lock_guard<std::mutex> lock(mutex_);
  return take_results(start);
}

std::optional<Share> ParameterServerEngine::take_work(int r, std::unique_lock<std::mutex>& lock) {
  for (;;) {
    if (failed_) return std::nullopt;
    detail::ParameterServerSchedule::Next next = schedule_.next(r, closing_);
    if (next.changed) changed_.notify_all();
    using Kind = detail::ParameterServerSchedule::Next::Kind;
    if (next.kind == Kind::compute) return std::move(next.share);
    if (next.kind == Kind::stop) return std::nullopt;
    changed_.wait(lock);
  }
}

void ParameterServerEngine::pull(Worker& w, bool held_here_only) {
  for (size_t i = 0; i < server_.size(); ++i) {
    if (held_here_only && !held_here_[i]) continue;
    Tensor value = w.parameters[i].value();
    value.copy_from(server_[i].value());
    w.parameters[i].mark_modified();
  }
  if (scaler_) *w.scaler = *scaler_;
}

void ParameterServerEngine::worker_loop(int r) {
  Worker& w = workers_[r];
  ReplicaScope scope(w.context);
  std::unique_lock<std::mutex> lock(mutex_);
  try {
    for (;;) {
      const auto wait_start = Clock::now();
      std::optional<Share> work = take_work(r, lock);
      const auto pull_start = Clock::now();
      w.times.idle += seconds(pull_start - wait_start);
      if (!work) return;
      const int64_t version = *schedule_.computing_on(r);
      pull(w, /*held_here_only=*/true);
      w.times.communication += seconds(Clock::now() - pull_start);
      lock.unlock();
      Gradient g;
      if (remote_) {
        try {
          g = compute_remote(r, w, *work, version);
        } catch (const PeerFailed& e) {
          lock.lock();
          w.silent = remote_->links[static_cast<size_t>(r)]->peer_silent();
          lose_worker(r, std::move(work), e.what());
          return;
        }
      } else {
        g = compute(w, *work);
      }
      lock.lock();
      const auto push_start = Clock::now();
      w.times.forward += g.forward_seconds;
      w.times.backward += g.backward_seconds;
      w.times.communication += g.wire_seconds;
      w.loss_sum += g.loss_sum;
      w.rows += g.rows;
      if (w.reports.size() < g.reports.size()) w.reports.resize(g.reports.size(), 0.0);
      for (size_t i = 0; i < g.reports.size(); ++i) w.reports[i] += g.reports[i];
      if (synchronous()) {
        push_to_round(r, *work, g);
      } else {
        push_asynchronous(r, *work, g);
      }
      w.times.optimizer += seconds(Clock::now() - push_start);
      changed_.notify_all();
    }
  } catch (...) {
    if (!lock.owns_lock()) lock.lock();
    schedule_.abandon(r);
    failed_ = true;
    changed_.notify_all();
    throw;
  }
}

int64_t ParameterServerEngine::divisor(const Share& work) const {
  // A round's gradients add up to its batch's mean; an asynchronous one
  // is the mean over its own rows.
  return synchronous() ? work.global_rows : std::max<int64_t>(rows_of(work.rows), 1);
}

Gradient ParameterServerEngine::compute(Worker& w, const Share& work) {
  Gradient g;
  static_cast<detail::WorkerGradient&>(g) = detail::compute_worker_gradient(
      *w.model, w.parameters, *work.forward, work.rows, work.global_rows, divisor(work), work.step,
      options_, w.context, w.scaler.get());
  return g;
}

void ParameterServerEngine::lose_worker(int r, std::optional<Share> work, const std::string& why) {
  Worker& w = workers_[static_cast<size_t>(r)];
  const bool round_waits = schedule_.lose(r, std::move(work));
  const int live = schedule_.live_workers();
  // `why` names the worker (the link's errors name their peer).
  warn(fmt::format("parameter-server worker lost: {}; training goes on with {} worker(s)", why,
                   live));
  // A gradient it pushed to the shard ranks but never reported is of no use.
  tell_shards({.discards = {{w.context.global_replica, -1}}});
  if (live == 0) {
    failed_ = true;
    if (!error_) {
      error_ = std::make_exception_ptr(
          PeerFailed("every parameter-server worker was lost (the last: " +
                     remote_->names[static_cast<size_t>(r)] + ": " + why + ")"));
    }
  } else if (round_waits) {
    finish_round_if_complete();  // the round may need one gradient fewer now
  }
  changed_.notify_all();
}

void ParameterServerEngine::stage(const Worker& w, bool add) {
  for (size_t i = 0; i < server_.size(); ++i) {
    if (!held_here_[i]) continue;  // a shard rank stages it (staged_[i] stays false)
    const Variable& p = w.parameters[i];
    Tensor staged = server_[i].grad_buffer();
    if (!add) staged_[i] = false;
    if (!p.has_grad()) {
      if (!staged_[i]) staged.fill(0.0f);
      continue;
    }
    if (add && staged_[i]) {
      kernels::add_into(staged, p.grad());
    } else {
      staged.copy_from(p.grad());
    }
    staged_[i] = true;
  }
}

void ParameterServerEngine::apply(double learning_rate, detail::ShardUpdate update,
                                  const std::vector<double>* worker_squares) {
  trace::Span span("parameter server update", "step");
  for (size_t i = 0; i < server_.size(); ++i) {
    if (staged_[i]) {
      server_[i].define_grad();
    } else {
      server_[i].zero_grad();
    }
  }
  for (Shard& shard : shards_) {
    for (size_t k = 0; k < shard.views.size(); ++k) {
      if (staged_[pieces_[shard.pieces[k]].variable]) {
        shard.views[k].define_grad();
      } else {
        shard.views[k].zero_grad();
      }
    }
  }
  update.advance = update.step = true;
  update.learning_rate = learning_rate;
  const double max_norm = options_.optimizer.global_clip_norm;
  if (max_norm > 0.0 && !remote_shards()) {
    optim::clip_grad_norm(server_, max_norm);
  } else if (max_norm > 0.0) {
    // The norm is over every shard's part of the update: one gradient's
    // comes from its worker; a round's sum is asked of the shard ranks.
    std::vector<Variable>& local = shards_.front().views;
    double squares = 0.0;
    if (worker_squares && worker_squares->size() == shards_.size()) {
      for (double s : *worker_squares) squares += s;
      update.clip_norm = std::sqrt(squares);
      tell_shards(update);
    } else {
      update.report_squares = true;
      tell_shards(update);
      squares = optim::gradient_squares(local);
      for (Shard& shard : shards_) {
        if (!shard.link) continue;
        const std::string payload = shard.link->receive(
            detail::FrameKind::squares, "the update's squares", remote_->silence_seconds);
        detail::FrameReader in(payload, "squares from " + shard.link->peer());
        squares += in.f64();
      }
      detail::FrameWriter norm;
      norm.f64(std::sqrt(squares));
      for (Shard& shard : shards_)
        if (shard.link) shard.link->send(detail::FrameKind::norm, {norm.bytes()});
    }
    optim::clip_to_norm(local, std::sqrt(squares), max_norm);
  } else {
    tell_shards(update);
  }
  for (Shard& shard : shards_) {
    if (!shard.optimizer) continue;
    shard.optimizer->set_learning_rate(learning_rate);
    shard.optimizer->step();
  }
}

void ParameterServerEngine::push_asynchronous(int r, const Share& work, const Gradient& g) {
  const Worker& w = workers_[static_cast<size_t>(r)];
  const int64_t staleness = schedule_.arrive_asynchronous(r, g.finite);
  const detail::ShareId id{w.context.global_replica, g.share};
  if (scaler_) scaler_->update(g.finite);
  if (!g.finite) {
    tell_shards({.discards = {id}});
    return;
  }
  stage(w, /*add=*/false);
  double lr = work.learning_rate.value_or(options_.optimizer.learning_rate);
  if (ps_.staleness_aware_lr && staleness > 1) lr /= static_cast<double>(staleness);
  apply(lr, {.sources = {id}}, &g.shard_squares);
}

void ParameterServerEngine::push_to_round(int r, const Share& work, const Gradient& g) {
  const Worker& w = workers_[static_cast<size_t>(r)];
  const detail::ShareId id{w.context.global_replica, g.share};
  const auto arrival = schedule_.arrive_in_round(r, work, g.rows, g.finite, id);
  if (arrival.late) {  // its round was applied without it
    tell_shards({.discards = {id}});
    return;
  }
  if (arrival.first) std::fill(staged_.begin(), staged_.end(), false);
  if (g.finite) stage(w, /*add=*/true);
  finish_round_if_complete();
}

void ParameterServerEngine::finish_round_if_complete() {
  std::optional<detail::ParameterServerSchedule::CompletedRound> round = schedule_.complete_round();
  if (!round) return;
  if (!round->apply) {
    tell_shards(round->update);
  } else {
    if (round->factor != 1.0f) {
      for (size_t i = 0; i < server_.size(); ++i) {
        if (!staged_[i]) continue;
        Tensor staged = server_[i].grad_buffer();
        kernels::add_into(staged, staged, round->factor - 1.0f);
      }
    }
    apply(round->learning_rate.value_or(options_.optimizer.learning_rate),
          std::move(round->update));
  }
  if (scaler_) scaler_->update(round->finite);
}

StepResult ParameterServerEngine::take_results(Clock::time_point since) {
  StepResult result;
  double loss_sum = 0.0;
  result.dropped_rows = schedule_.take_dropped();
  for (Worker& w : workers_) {
    result.replica_loss_sums.push_back(w.loss_sum);
    if (remote_) result.replica_reports.push_back(std::exchange(w.reports, {}));
    result.global_rows += w.rows;
    loss_sum += w.loss_sum;
    ReplicaStepTime t = w.times;
    t.replica = w.context.global_replica;
    t.examples = w.rows;
    result.replicas.push_back(t);
    result.idle_seconds += t.idle;
    result.exposed_communication_seconds += t.communication;
    w.loss_sum = 0.0;
    w.rows = 0;
    w.times = {};
  }
  result.loss = result.global_rows > 0 ? loss_sum / static_cast<double>(result.global_rows)
                                       : std::numeric_limits<double>::quiet_NaN();
  result.idle_seconds /= static_cast<double>(workers());
  result.exposed_communication_seconds /= static_cast<double>(workers());
  result.staleness = schedule_.take_staleness();
  const detail::ParameterServerSchedule::Updates updates = schedule_.take_updates();
  result.skipped = updates.rejected > 0 && updates.applied == 0;
  if (scaler_) result.loss_scale = scaler_->scale();
  result.seconds = seconds(Clock::now() - since);
  return result;
}

void ParameterServerEngine::evaluate(const data::Element& batch, const EvaluateFn& fn) {
  drain();
  detail::evaluate_on_replicas(
      strategy(), [&](int r) -> nn::Module& { return *workers_[r].model; }, batch, fn);
}

}  // namespace detail

std::unique_ptr<Engine> make_parameter_server_engine(Strategy& strategy, const ModelBuilder& build,
                                                     const EngineOptions& options,
                                                     std::shared_ptr<RemoteWorkers> remote) {
  return std::make_unique<detail::ParameterServerEngine>(strategy, build, options,
                                                         std::move(remote));
}

}  // namespace tandem::distribute
