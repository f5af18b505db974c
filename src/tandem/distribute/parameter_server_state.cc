// The parameter-server engine's state (detail/parameter_server_engine.h):
// the server's values and each shard's optimizer state, a shard rank's
// fetched over its link, saved under the replicated optimizer's names
// ("optimizer.<variable>.<slot>", "optimizer.updates") so that a checkpoint
// loads into any strategy, and loaded back shard by shard.
#include <algorithm>
#include <iterator>
#include <string>

#include "tandem/base/error.h"
#include "tandem/distribute/detail/parameter_server_engine.h"

namespace tandem::distribute::detail {

void ParameterServerEngine::load_shard_rank(
    int k, const std::vector<std::pair<std::string, Tensor>>& state) {
  detail::WorkerLink& link = *shards_[static_cast<size_t>(k)].link;
  detail::FrameWriter load;
  detail::write_shard_values(load, pieces_, k, server_);
  detail::write_named_tensors(load, state);
  link.send(detail::FrameKind::load, {load.bytes()});
  link.receive(detail::FrameKind::ack, "an ack of its values", remote_->silence_seconds);
}

std::vector<std::pair<std::string, Tensor>> ParameterServerEngine::shard_state(Shard& shard) {
  if (!shard.link) {
    std::vector<std::pair<std::string, Tensor>> state;
    for (const auto& [name, t] : shard.optimizer->state()) state.emplace_back(name, *t);
    return state;
  }
  shard.link->send(detail::FrameKind::state, {});
  const std::string payload = shard.link->receive(detail::FrameKind::state, "its optimizer state",
                                                  remote_->silence_seconds);
  detail::FrameReader in(payload, "optimizer state from " + shard.link->peer());
  return detail::read_named_tensors(in);
}

EngineState ParameterServerEngine::save_state() {
  drain();
  EngineState state;
  save_model_state(*workers_.front().model, state);  // the server's values, worker 0's buffers
  // Each shard's state, put together under the replicated optimizer's
  // names: "<variable index>.<slot>" and "updates" (one count per variable).
  Tensor updates = Tensor::zeros(Shape{static_cast<int64_t>(server_.size())}, DType::i32);
  std::vector<std::vector<std::pair<std::string, Tensor>>> slots(server_.size());
  for (Shard& shard : shards_) {
    for (const auto& [name, t] : shard_state(shard)) {
      if (name == "updates") {
        for (size_t k = 0; k < shard.pieces.size(); ++k)
          updates.data<int32_t>()[pieces_[shard.pieces[k]].variable] = t.data<int32_t>()[k];
        continue;
      }
      const size_t dot = name.find('.');
      const VariablePiece& piece = pieces_[shard.pieces.at(std::stoul(name.substr(0, dot)))];
      const std::string slot = name.substr(dot + 1);
      auto& mine = slots[piece.variable];
      auto it =
          std::find_if(mine.begin(), mine.end(), [&](const auto& s) { return s.first == slot; });
      if (it == mine.end()) {
        mine.emplace_back(slot, Tensor::zeros(server_[piece.variable].shape(), DType::f32));
        it = std::prev(mine.end());
      }
      Tensor whole = it->second;
      if (whole.rank() == 0) {
        whole.copy_from(t);
      } else {
        Tensor rows = whole.slice(piece.begin, piece.end);
        rows.copy_from(t);
      }
    }
  }
  state.tensors.emplace_back("optimizer.updates", updates);
  for (size_t i = 0; i < slots.size(); ++i) {
    for (auto& [slot, t] : slots[i])
      state.tensors.emplace_back("optimizer." + std::to_string(i) + "." + slot, t);
  }
  detail::save_scaler_state(scaler_.get(), state);
  return state;
}

void ParameterServerEngine::load_state(const EngineState& state) {
  drain();
  std::lock_guard<std::mutex> lock(mutex_);
  for (Worker& w : workers_) load_model_state(state, *w.model);
  for (size_t i = 0; i < server_.size(); ++i) {
    Tensor value = server_[i].value();
    value.copy_from(workers_.front().parameters[i].value());
  }
  const Tensor& updates = state.tensor("optimizer.updates");
  if (updates.dtype() != DType::i32 || updates.numel() != static_cast<int64_t>(server_.size())) {
    TANDEM_THROW(IoError, "checkpoint tensor 'optimizer.updates' has ", updates.numel(),
                 " counts for ", server_.size(), " parameters");
  }
  for (size_t s = 0; s < shards_.size(); ++s) {
    Shard& shard = shards_[s];
    std::vector<std::pair<std::string, Tensor>> own = shard_state(shard);
    for (auto& [name, t] : own) {
      if (name == "updates") {
        for (size_t k = 0; k < shard.pieces.size(); ++k)
          t.data<int32_t>()[k] = updates.data<int32_t>()[pieces_[shard.pieces[k]].variable];
        continue;
      }
      const size_t dot = name.find('.');
      const VariablePiece& piece = pieces_[shard.pieces.at(std::stoul(name.substr(0, dot)))];
      const std::string full = "optimizer." + std::to_string(piece.variable) + name.substr(dot);
      const Tensor& whole = state.tensor(full);
      if (whole.shape() != server_[piece.variable].shape() || whole.dtype() != DType::f32) {
        TANDEM_THROW(IoError, "checkpoint tensor '", full, "' has shape ",
                     whole.shape().to_string(), ", expected ",
                     server_[piece.variable].shape().to_string());
      }
      t.copy_from(whole.rank() == 0 ? whole : whole.slice(piece.begin, piece.end));
    }
    if (shard.link) load_shard_rank(static_cast<int>(s), own);
  }
  detail::load_scaler_state(state, scaler_.get());
  for (Worker& w : workers_) pull(w);
}

}  // namespace tandem::distribute::detail
