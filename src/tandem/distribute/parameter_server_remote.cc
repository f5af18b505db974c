// The parameter-server engine's worker processes and shard ranks, seen from
// the chief (detail/parameter_server_engine.h): a share sent to a worker
// process and its gradient back, the shard ranks told of each update and
// asked for their values, and the end of the job: every process told to
// stop, and a silent worker on this host killed (mpirun would wait for it).
#include <signal.h>

#include <fmt/format.h>

#include <algorithm>

#include "tandem/base/error.h"
#include "tandem/base/warnings.h"
#include "tandem/comm/mpi.h"
#include "tandem/distribute/detail/parameter_server_engine.h"

namespace tandem::distribute::detail {

ParameterServerEngine::~ParameterServerEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
    failed_ = true;  // nothing more to do: the workers leave at once
  }
  changed_.notify_all();
  if (runner_.joinable()) runner_.join();
  if (!remote_) return;
  // The worker processes end when told (or, failing that, when the
  // connection closes with this process). After a loss every process of
  // the job bounds its MPI_Finalize: Open MPI 4.1's may wait for the dead
  // rank forever (seen one run in four on one host).
  const bool any_lost = schedule_.live_workers() < workers();
  if (any_lost) comm::end_mpi_job_at_exit();
  detail::FrameWriter stop;
  stop.u64(any_lost ? 1 : 0);
  for (size_t r = 0; r < remote_->links.size(); ++r) {
    if (workers_[r].silent && remote_->on_this_host[r]) {
      // Stopped or hung: mpirun would wait for it at the end of the job.
      ::kill(remote_->pids[r], SIGKILL);
    } else if (workers_[r].silent) {
      warn(fmt::format(
          "{} was given up while its process may still run; mpirun waits for it until it ends "
          "(end it on its host)",
          remote_->names[r]));
    }
    if (schedule_.lost(static_cast<int>(r))) continue;
    try {
      remote_->links[r]->send(detail::FrameKind::stop, {stop.bytes()});
    } catch (const Error&) {
    }
    remote_->links[r]->close();
  }
  for (auto& link : remote_->shard_links) {
    try {
      link->send(detail::FrameKind::stop, {stop.bytes()});
    } catch (const Error&) {
    }
    link->close();
  }
}

void ParameterServerEngine::fetch_remote_values() {
  for (size_t k = 0; k < shards_.size(); ++k) {
    detail::WorkerLink* link = shards_[k].link;
    if (link == nullptr) continue;
    link->send(detail::FrameKind::values, {});
    const std::string payload =
        link->receive(detail::FrameKind::values, "its values", remote_->silence_seconds);
    detail::FrameReader in(payload, "values from " + link->peer());
    detail::read_shard_values(in, pieces_, static_cast<int>(k), server_);
  }
}

Gradient ParameterServerEngine::compute_remote(int r, Worker& w, const Share& work,
                                               int64_t version) {
  detail::WorkerLink& link = *remote_->links[static_cast<size_t>(r)];
  const std::string& name = remote_->names[static_cast<size_t>(r)];
  const auto start = Clock::now();
  Gradient g;
  g.share = ++w.shares;
  {
    detail::FrameWriter out;
    detail::write_work(out, {.step = work.step,
                             .global_rows = work.global_rows,
                             .divisor = divisor(work),
                             .scale = w.scaler ? w.scaler->scale() : 0.0,
                             .version = version,
                             .share = g.share});
    out.element(work.rows);
    // Shard 0's values; the worker pulls the other shards' from their ranks.
    detail::write_shard_values(out, pieces_, 0, w.parameters);
    // Buffers (batch norm's running statistics) are each worker's own, as
    // in one process: its copy here travels out and back with every share.
    detail::write_buffers(out, *w.model);
    link.send(detail::FrameKind::work, {out.bytes()});
  }
  detail::maybe_kill_after_work(handed_out_.fetch_add(1) + 1);
  const std::string payload =
      link.receive(detail::FrameKind::gradient, "a gradient", remote_->silence_seconds);
  detail::FrameReader in(payload, "gradient from " + name);
  detail::GradientReport report = detail::read_report(in);
  g.rows = report.rows;
  g.loss_sum = report.loss_sum;
  g.finite = report.finite;
  g.forward_seconds = report.forward_seconds;
  g.backward_seconds = report.backward_seconds;
  g.reports = std::move(report.reports);
  g.shard_squares = std::move(report.shard_squares);
  for (Variable& p : w.parameters) p.zero_grad();
  detail::read_shard_gradients(in, pieces_, 0, w.parameters);
  detail::read_buffers(in, *w.model);
  // The wire and the remote process's own overhead count as communication.
  const double wall = seconds(Clock::now() - start);
  g.wire_seconds = std::max(0.0, wall - g.forward_seconds - g.backward_seconds);
  return g;
}

void ParameterServerEngine::tell_shards(const detail::ShardUpdate& update) {
  if (!remote_shards()) return;
  detail::FrameWriter out;
  detail::write_update(out, update);
  for (Shard& shard : shards_)
    if (shard.link) shard.link->send(detail::FrameKind::update, {out.bytes()});
}

}  // namespace tandem::distribute::detail
