#include "tandem/distribute/sharded_optimizer.h"

#include <algorithm>
#include <cmath>

#include "tandem/base/error.h"
#include "tandem/distribute/agreement.h"

namespace tandem::distribute {
namespace {

// "<index>.<slot>" -> (index, slot); false for other names ("updates").
bool split_state_name(const std::string& name, size_t& index, std::string& slot) {
  const size_t dot = name.find('.');
  if (dot == std::string::npos || dot == 0) return false;
  index = std::stoul(name.substr(0, dot));
  slot = name.substr(dot + 1);
  return true;
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(std::vector<Variable> parameters, const Reducer& reducer,
                                   comm::Communicator& comm, const optim::OptimizerConfig& config)
    : parameters_(std::move(parameters)), comm_(comm) {
  if (reducer.zero_stage() == 0)
    TANDEM_THROW(InvalidArgument, "ShardedOptimizer needs a Reducer with a ZeRO stage");
  const Device device =
      parameters_.empty() ? current_device() : parameters_.front().value().device();
  flat_ = std::make_unique<comm::Bucketer>(
      reducer.bucketer().with_new_buffers(MemoryCategory::parameters, device));
  const size_t n = parameters_.size();
  if (flat_->tensor_count() != n)
    TANDEM_THROW(InvalidArgument, "ShardedOptimizer: the Reducer holds ", flat_->tensor_count(),
                 " parameters, got ", n);
  // The parameters now live in the flat buffers (layout index n - 1 - i).
  for (size_t i = 0; i < n; ++i) {
    Tensor view = flat_->view(n - 1 - i);
    view.copy_from(parameters_[i].value());
    parameters_[i].set_value(view);
  }
  int64_t largest = 0;
  for (size_t b = 0; b < flat_->bucket_count(); ++b) {
    const int64_t shard = shard_elements(b);
    largest = std::max(largest, shard);
    Variable v(flat_->bucket(b).slice(comm.rank() * shard, (comm.rank() + 1) * shard), true);
    v.set_name("shard" + std::to_string(b));
    v.set_grad_buffer(reducer.shard_gradient(b));
    shards_.push_back(v);
  }
  gather_input_ = Tensor::empty(Shape{largest}, DType::f32, device, MemoryCategory::communication);
  optimizer_ = optim::make_optimizer(config, shards_);
}

int64_t ShardedOptimizer::shard_elements(size_t bucket) const {
  return flat_->bucket_elements(bucket) / comm_.size();
}

ShardedOptimizer::Outcome ShardedOptimizer::update(precision::LossScaler* scaler,
                                                   double clip_norm) {
  Outcome outcome;
  for (Variable& s : shards_) s.define_grad();
  if (scaler) {
    const bool finite_here = scaler->unscale_and_check(shards_);
    outcome.finite = sum_in_group(comm_, finite_here ? 0.0 : 1.0) == 0.0;
    scaler->update(outcome.finite);
    if (!outcome.finite) return outcome;
  }
  if (clip_norm > 0.0) {
    const double norm = std::sqrt(sum_in_group(comm_, optim::gradient_squares(shards_)));
    outcome.gradient_norm = optim::clip_to_norm(shards_, norm, clip_norm);
  }
  optimizer_->step();
  for (size_t b = 0; b < shards_.size(); ++b) {
    const int64_t shard = shard_elements(b);
    Tensor input = gather_input_.slice(0, shard);
    input.copy_from(shards_[b].value());
    comm_.all_gather(input, flat_->bucket(b));
  }
  for (Variable& p : parameters_) p.mark_modified();
  return outcome;
}

std::vector<std::pair<std::string, Tensor>> ShardedOptimizer::gather_state(bool keep,
                                                                           int64_t piece) {
  std::vector<std::pair<std::string, Tensor>> out;
  StateSink sink;
  if (keep) sink = [&](const std::string& name, const Tensor& t) { out.emplace_back(name, t); };
  gather_state(sink, piece);
  return out;
}

std::vector<TensorLayout> ShardedOptimizer::state_layout() const {
  const size_t n = parameters_.size();
  std::vector<TensorLayout> layout;
  for (const auto& [name, tensor] : optimizer_->state()) {
    size_t bucket = 0;
    std::string slot;
    if (!split_state_name(name, bucket, slot)) continue;
    for (size_t layout_index : flat_->tensors_in(bucket)) {
      const size_t i = n - 1 - layout_index;
      layout.push_back({std::to_string(i) + "." + slot, parameters_[i].shape(), DType::f32});
    }
  }
  layout.push_back({"updates", Shape{static_cast<int64_t>(n)}, DType::i32});
  return layout;
}

void ShardedOptimizer::gather_state(const StateSink& keep, int64_t piece) {
  if (piece < 1) TANDEM_THROW(InvalidArgument, "gather_state: pieces of ", piece, " elements");
  const size_t n = parameters_.size();
  const int64_t ranks = comm_.size();
  std::vector<int32_t> updates(n, 0);
  Tensor pieces;  // ranks x piece elements, reused
  for (const auto& [name, tensor] : optimizer_->state()) {
    size_t bucket = 0;
    std::string slot;
    if (!split_state_name(name, bucket, slot)) {  // "updates": one count per bucket
      for (size_t b = 0; b < flat_->bucket_count(); ++b)
        for (size_t layout_index : flat_->tensors_in(b))
          updates[n - 1 - layout_index] = tensor->data<int32_t>()[b];
      continue;
    }
    // The kept state of this slot, one tensor per parameter of the bucket:
    // one bucket's slot at a time is all a keeping replica holds.
    const std::vector<size_t>& members = flat_->tensors_in(bucket);
    std::vector<Tensor> whole;
    if (keep) {
      for (size_t layout_index : members) {
        const Shape& shape = parameters_[n - 1 - layout_index].shape();
        whole.push_back(Tensor::empty(Shape{shape.numel()}, DType::f32, tensor->device(),
                                      MemoryCategory::optimizer_state));
      }
    }
    // Piece by piece, so that a replica that keeps nothing holds one piece
    // per rank rather than a whole bucket: elements [a, a + len) of every
    // rank's shard, i.e. bucket elements r * shard + [a, a + len).
    const int64_t shard = shard_elements(bucket);
    for (int64_t a = 0; a < shard; a += piece) {
      const int64_t len = std::min(piece, shard - a);
      if (!pieces.defined())
        pieces = Tensor::empty(Shape{ranks * std::min(piece, shard)}, DType::f32, tensor->device(),
                               MemoryCategory::optimizer_state);
      if (pieces.numel() < ranks * len) {
        // The smaller buffer goes first: held while the larger one was
        // made, the two raised the peak past the memory plan's.
        pieces = Tensor();
        pieces = Tensor::empty(Shape{ranks * len}, DType::f32, tensor->device(),
                               MemoryCategory::optimizer_state);
      }
      const Tensor gathered = pieces.slice(0, ranks * len);
      comm_.all_gather(tensor->slice(a, a + len), gathered);
      if (!keep) continue;
      for (int64_t r = 0; r < ranks; ++r) {
        const int64_t from = r * shard + a, to = from + len;  // bucket elements
        for (size_t m = 0; m < members.size(); ++m) {
          const int64_t offset = flat_->offset_of(members[m]);
          const int64_t lo = std::max(from, offset), hi = std::min(to, offset + whole[m].numel());
          if (lo >= hi) continue;
          Tensor target = whole[m].slice(lo - offset, hi - offset);
          target.copy_from(gathered.slice(r * len + lo - from, r * len + hi - from));
        }
      }
    }
    for (size_t m = 0; m < whole.size(); ++m) {
      const size_t i = n - 1 - members[m];
      keep(std::to_string(i) + "." + slot, whole[m].reshape(parameters_[i].shape()));
    }
  }
  if (!keep) return;
  keep("updates", Tensor::from_ints(Shape{static_cast<int64_t>(n)}, updates)
                      .clone(MemoryCategory::optimizer_state));
}

Tensor ShardedOptimizer::update_counts(const EngineState& state, const std::string& prefix) const {
  Tensor counts = Tensor::empty(Shape{static_cast<int64_t>(parameters_.size())}, DType::i32);
  state.load_into(prefix + "updates", counts);
  return counts;
}

void ShardedOptimizer::check_state(const EngineState& state, const std::string& prefix) const {
  const size_t n = parameters_.size();
  const Tensor counts = update_counts(state, prefix);
  const int32_t* count = counts.data<int32_t>();
  for (const auto& [name, tensor] : optimizer_->state()) {
    size_t bucket = 0;
    std::string slot;
    const bool updates = !split_state_name(name, bucket, slot);
    for (size_t b = updates ? 0 : bucket; b < (updates ? flat_->bucket_count() : bucket + 1); ++b) {
      const std::vector<size_t>& members = flat_->tensors_in(b);
      for (size_t layout_index : members) {
        const size_t i = n - 1 - layout_index;
        if (updates) {
          const size_t first = n - 1 - members.front();
          if (count[i] != count[first]) {
            TANDEM_THROW(InvalidArgument, "ZeRO keeps one update count per bucket, but parameters ",
                         first, " and ", i, " of bucket ", b, " were updated ", count[first],
                         " and ", count[i], " times in the state loaded");
          }
          continue;
        }
        const std::string key = prefix + std::to_string(i) + "." + slot;
        const Tensor& saved = state.tensor(key);  // IoError when absent
        if (saved.shape() != parameters_[i].shape() || saved.dtype() != DType::f32) {
          TANDEM_THROW(IoError, "checkpoint tensor '", key, "' is ", saved.to_string(),
                       ", expected f32 ", parameters_[i].shape().to_string());
        }
      }
    }
  }
}

void ShardedOptimizer::load_state(const EngineState& state, const std::string& prefix) {
  const size_t n = parameters_.size();
  check_state(state, prefix);
  const Tensor counts = update_counts(state, prefix);
  const int32_t* count = counts.data<int32_t>();
  for (const auto& [name, tensor] : optimizer_->state()) {
    size_t bucket = 0;
    std::string slot;
    if (!split_state_name(name, bucket, slot)) {  // "updates"
      for (size_t b = 0; b < flat_->bucket_count(); ++b) {
        const std::vector<size_t>& members = flat_->tensors_in(b);
        if (!members.empty()) tensor->data<int32_t>()[b] = count[n - 1 - members.front()];
      }
      continue;
    }
    // This replica's range of the bucket, filled from each parameter's state.
    const int64_t shard = shard_elements(bucket);
    const int64_t begin = comm_.rank() * shard;
    const int64_t end = begin + shard;
    tensor->zero();
    for (size_t layout_index : flat_->tensors_in(bucket)) {
      const size_t i = n - 1 - layout_index;
      const int64_t offset = flat_->offset_of(layout_index);
      const int64_t numel = parameters_[i].shape().numel();
      const int64_t from = std::max(begin, offset);
      const int64_t to = std::min(end, offset + numel);
      if (from >= to) continue;
      Tensor whole = Tensor::empty(parameters_[i].shape());
      state.load_into(prefix + std::to_string(i) + "." + slot, whole);
      Tensor target = tensor->slice(from - begin, to - begin);
      target.copy_from(whole.reshape(Shape{numel}).slice(from - offset, to - offset));
    }
  }
}

}  // namespace tandem::distribute
