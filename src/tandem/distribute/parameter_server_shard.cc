// Shard rank k of the parameter-server strategy across processes
// (parameter_server_processes.h): shard k's master values and optimizer,
// one thread per worker answering its pulls and storing its pushes, and
// this thread applying the updates the chief orders, in the chief's order.
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "tandem/base/error.h"
#include "tandem/base/warnings.h"
#include "tandem/comm/mpi.h"
#include "tandem/distribute/detail/engine_parts.h"
#include "tandem/distribute/detail/ps_messages.h"
#include "tandem/distribute/parameter_server_processes.h"
#include "tandem/kernels/elementwise.h"
#include "tandem/optim/optimizer.h"

namespace tandem::distribute {
namespace {

class ShardServer {
 public:
  ShardServer(ShardRankLinks& links, int shard, nn::Module& model, const EngineOptions& options,
              double silence_seconds);
  ~ShardServer();
  // Until the chief says stop; throws PeerFailed when the chief is lost.
  void run();

 private:
  void serve_worker(size_t r);
  void load(detail::FrameReader& in);
  void update(const detail::ShardUpdate& u);
  void stage(const detail::ShardUpdate& u);
  std::string values_frame();
  std::string state_frame();

  ShardRankLinks& links_;
  const int shard_;
  const EngineOptions& options_;
  const double silence_seconds_;
  std::vector<Variable> server_;  // the whole model's masters; this shard's rows are current
  std::vector<VariablePiece> pieces_;
  std::vector<size_t> mine_;     // indices into pieces_ of this shard's pieces
  std::vector<Variable> views_;  // their rows, gradient included
  std::unique_ptr<optim::Optimizer> optimizer_;

  std::mutex mutex_;
  std::condition_variable changed_;
  bool loaded_ = false;  // the chief's first values are in
  int64_t version_ = 0;  // updates applied (pulls wait for theirs)
  bool stopping_ = false;
  // Pushed gradients until an update uses or drops them: per piece of
  // this shard, its rows (none: the variable had no gradient).
  std::map<detail::ShareId, std::vector<std::optional<Tensor>>> gradients_;
  std::atomic<int64_t> pulls_{0};  // the fault-injection hook's count
  std::vector<std::thread> threads_;
};

ShardServer::ShardServer(ShardRankLinks& links, int shard, nn::Module& model,
                         const EngineOptions& options, double silence_seconds)
    : links_(links), shard_(shard), options_(options), silence_seconds_(silence_seconds) {
  for (const Variable& p : model.parameters()) {
    Variable master(p.value().clone(), true);
    master.set_grad_buffer(Tensor::zeros(p.shape(), DType::f32));
    server_.push_back(master);
  }
  pieces_ = detail::server_pieces(server_, options);
  views_ = detail::shard_views(server_, pieces_, shard_, &mine_);
  optimizer_ = optim::make_optimizer(options.optimizer, views_);
}

ShardServer::~ShardServer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& link : links_.workers)
    if (link) link->close();
  for (std::thread& t : threads_) t.join();
}

std::string ShardServer::values_frame() {
  detail::FrameWriter out;
  std::lock_guard<std::mutex> lock(mutex_);
  detail::write_shard_values(out, pieces_, shard_, server_);
  return out.bytes();
}

std::string ShardServer::state_frame() {
  std::vector<std::pair<std::string, Tensor>> state;
  for (const auto& [name, t] : optimizer_->state()) state.emplace_back(name, *t);
  detail::FrameWriter out;
  detail::write_named_tensors(out, state);
  return out.bytes();
}

void ShardServer::serve_worker(size_t r) {
  detail::WorkerLink& link = *links_.workers[r];
  try {
    for (;;) {
      auto [kind, payload] = link.receive(silence_seconds_);
      detail::FrameReader in(payload, "a frame from " + link.peer());
      if (kind == detail::FrameKind::pull) {
        const auto version = static_cast<int64_t>(in.u64());
        detail::maybe_kill_after_work(pulls_.fetch_add(1) + 1);
        {
          std::unique_lock<std::mutex> lock(mutex_);
          changed_.wait(lock, [&] { return stopping_ || (loaded_ && version_ >= version); });
          if (stopping_) return;
        }
        link.send(detail::FrameKind::values, {values_frame()});
      } else if (kind == detail::FrameKind::push) {
        detail::ShareId id;
        id.worker = static_cast<int64_t>(in.u64());
        id.share = static_cast<int64_t>(in.u64());
        if (id.worker != static_cast<int64_t>(r))
          TANDEM_THROW(IoError, link.peer(), " pushed a gradient as worker ", id.worker);
        std::vector<std::optional<Tensor>> rows;
        for (size_t k : mine_) {
          if (in.u64() == 0) {
            rows.emplace_back();
            continue;
          }
          // Every byte is read into it: no need to zero it first.
          Tensor t = Tensor::empty(
              detail::piece_of(server_[pieces_[k].variable].value(), pieces_[k]).shape(),
              DType::f32);
          in.tensor_into(t);
          rows.emplace_back(std::move(t));
        }
        {
          std::lock_guard<std::mutex> lock(mutex_);
          gradients_[id] = std::move(rows);
        }
        link.send(detail::FrameKind::ack, {});
      } else {
        TANDEM_THROW(IoError, link.peer(), " sent frame kind ", static_cast<int>(kind));
      }
    }
  } catch (const PeerFailed&) {
    // A lost worker: the chief notices it and trains on without it.
  } catch (const Error& e) {
    warn(fmt::format("parameter-server shard {} dropped {}: {}", shard_, link.peer(), e.what()));
    link.close();
  }
}

void ShardServer::load(detail::FrameReader& in) {
  std::lock_guard<std::mutex> lock(mutex_);
  detail::read_shard_values(in, pieces_, shard_, server_);
  const auto tensors = detail::read_named_tensors(in);
  for (const auto& [name, into] : optimizer_->state()) {
    for (const auto& [given, t] : tensors) {
      if (given != name) continue;
      if (t.shape() != into->shape() || t.dtype() != into->dtype()) {
        TANDEM_THROW(IoError, "the chief sent optimizer state '", name, "' of shape ",
                     t.shape().to_string(), " for ", into->shape().to_string());
      }
      into->copy_from(t);
    }
  }
  loaded_ = true;
  changed_.notify_all();
}

void ShardServer::stage(const detail::ShardUpdate& u) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const detail::ShareId& d : u.discards) {
    if (d.share >= 0) {
      gradients_.erase(d);
      continue;
    }
    std::erase_if(gradients_, [&](const auto& g) { return g.first.worker == d.worker; });
  }
  if (!u.step) return;
  std::vector<const std::vector<std::optional<Tensor>>*> sources;
  for (const detail::ShareId& s : u.sources) {
    const auto it = gradients_.find(s);
    if (it == gradients_.end()) {
      TANDEM_THROW(IoError, "the parameter server named worker ", s.worker, "'s gradient #",
                   s.share, ", which never reached shard ", shard_);
    }
    sources.push_back(&it->second);
  }
  // As the chief stages its own shard: the first copied, the others added
  // in the order they arrived there, then rescaled.
  for (size_t j = 0; j < views_.size(); ++j) {
    Tensor staged = views_[j].grad_buffer();
    bool any = false;
    for (const auto* rows : sources) {
      const std::optional<Tensor>& g = (*rows)[j];
      if (!g) continue;
      if (any) {
        kernels::add_into(staged, *g);
      } else {
        staged.copy_from(*g);
      }
      any = true;
    }
    if (any && u.factor != 1.0)
      kernels::add_into(staged, staged, static_cast<float>(u.factor) - 1.0f);
    if (any) {
      views_[j].define_grad();
    } else {
      views_[j].zero_grad();
    }
  }
  for (const detail::ShareId& s : u.sources) gradients_.erase(s);
}

void ShardServer::update(const detail::ShardUpdate& u) {
  stage(u);
  if (u.step) {
    const double max_norm = options_.optimizer.global_clip_norm;
    if (u.report_squares) {
      detail::FrameWriter squares;
      squares.f64(optim::gradient_squares(views_));
      links_.chief->send(detail::FrameKind::squares, {squares.bytes()});
      const std::string payload =
          links_.chief->receive(detail::FrameKind::norm, "the update's norm", silence_seconds_);
      detail::FrameReader in(payload, "the update's norm");
      optim::clip_to_norm(views_, in.f64(), max_norm);
    } else if (u.clip_norm > 0.0 && max_norm > 0.0) {
      optim::clip_to_norm(views_, u.clip_norm, max_norm);
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (u.step) {
    optimizer_->set_learning_rate(u.learning_rate);
    optimizer_->step();
  }
  if (u.advance) ++version_;
  changed_.notify_all();
}

void ShardServer::run() {
  for (size_t r = 0; r < links_.workers.size(); ++r)
    threads_.emplace_back([this, r] { serve_worker(r); });
  detail::WorkerLink& chief = *links_.chief;
  for (;;) {
    auto [kind, payload] = chief.receive(silence_seconds_);
    detail::FrameReader in(payload, "a frame from " + chief.peer());
    switch (kind) {
      case detail::FrameKind::load:
        load(in);
        chief.send(detail::FrameKind::ack, {});
        break;
      case detail::FrameKind::update:
        update(detail::read_update(in));
        break;
      case detail::FrameKind::values:
        chief.send(detail::FrameKind::values, {values_frame()});
        break;
      case detail::FrameKind::state:
        chief.send(detail::FrameKind::state, {state_frame()});
        break;
      case detail::FrameKind::stop:
        // The chief lost a worker: a bounded MPI_Finalize here too.
        if (!in.done() && in.u64() != 0) comm::bound_mpi_finalize(kFinalizeSeconds);
        return;
      default:
        TANDEM_THROW(IoError, chief.peer(), " sent frame kind ", static_cast<int>(kind));
    }
  }
}

}  // namespace

void serve_parameter_server_shard(ShardRankLinks& links, int shard, nn::Module& model,
                                  const EngineOptions& options, double silence_seconds) {
  ShardServer server(links, shard, model, options, silence_seconds);
  server.run();
}

}  // namespace tandem::distribute
