#include "tandem/distribute/reducer.h"

#include <algorithm>
#include <chrono>

#include "tandem/base/error.h"
#include "tandem/kernels/elementwise.h"
#include "tandem/kernels/reduce.h"

namespace tandem::distribute {
namespace {

// Gradient buckets live on the parameters' device.
Device device_of(const std::vector<Variable>& parameters) {
  return parameters.empty() ? current_device() : parameters.front().value().device();
}

}  // namespace

Reducer::Reducer(std::vector<Variable> parameters, comm::Communicator& comm, ReducerOptions options)
    : parameters_(std::move(parameters)), comm_(comm), options_(options) {
  if (options.zero_stage < 0 || options.zero_stage > 2) {
    TANDEM_THROW(InvalidArgument, "ZeRO stage must be 0, 1 or 2, got ", options.zero_stage);
  }
  const bool stage2 = options.zero_stage == 2;
  if (stage2 && options.wire != comm::WireDType::f32) {
    TANDEM_THROW(InvalidArgument, "ZeRO stage 2 reduce-scatters f32 gradients; wire ",
                 comm::wire_dtype_name(options.wire), " is not supported with it");
  }
  // Reverse order: the last layer's gradients are ready first.
  std::vector<comm::TensorLayout> layouts;
  for (auto it = parameters_.rbegin(); it != parameters_.rend(); ++it) {
    if (it->dtype() != DType::f32) {
      TANDEM_THROW(InvalidArgument, "Reducer: parameter '", it->name(), "' is ",
                   dtype_name(it->dtype()), "; master weights must be f32");
    }
    layouts.push_back({it->shape(), it->dtype()});
  }
  const Device device = device_of(parameters_);
  bucketer_ = std::make_unique<comm::Bucketer>(
      layouts, comm::BucketerOptions{.bucket_bytes = options.bucket_bytes,
                                     .first_bucket_bytes = options.first_bucket_bytes,
                                     .category = MemoryCategory::gradients,
                                     .device = device,
                                     .pad_to = options.zero_stage > 0 ? comm.size() : 1,
                                     .allocate = !stage2});
  const size_t n = parameters_.size();
  const size_t buckets = bucketer_->bucket_count();
  bucket_of_parameter_.resize(n);
  ready_.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    const size_t layout_index = n - 1 - i;
    bucket_of_parameter_[i] = bucketer_->bucket_of(layout_index);
    // Under ZeRO-2 backward allocates each gradient; it is released once staged.
    if (!stage2) parameters_[i].set_grad_buffer(bucketer_->view(layout_index));
    parameters_[i].add_grad_ready_hook([this, i](Variable&) { on_ready(i); });
  }
  pending_.resize(buckets);
  works_.resize(buckets);
  if (options.wire != comm::WireDType::f32) {
    const DType wire = options.wire == comm::WireDType::bf16 ? DType::bf16 : DType::f16;
    for (size_t b = 0; b < buckets; ++b) {
      staging_.push_back(Tensor::empty(Shape{bucketer_->bucket(b).numel()}, wire, device,
                                       MemoryCategory::communication));
    }
  }
  if (stage2) {
    int64_t largest = 0;
    for (size_t b = 0; b < buckets; ++b) {
      largest = std::max(largest, bucketer_->bucket_elements(b));
      shards_.push_back(Tensor::zeros(Shape{bucketer_->bucket_elements(b) / comm.size()},
                                      DType::f32, device, MemoryCategory::gradients));
    }
    for (size_t s = 0; s < std::min(kStagingSlots, buckets); ++s)
      slots_.push_back(
          Tensor::zeros(Shape{largest}, DType::f32, device, MemoryCategory::communication));
    slot_taken_.assign(buckets, false);
    staged_.assign(n, false);
  }
}

Reducer::~Reducer() {
  // Bounded: every collective has its own deadline. A Work given up on still
  // holds its buffers (the call keeps them), so a late finish is harmless.
  for (auto& w : works_) {
    if (w) {
      try {
        w->wait(backstop_timeout());
      } catch (...) {
      }
    }
  }
  for (Variable& p : parameters_) p.clear_grad_ready_hooks();
}

std::chrono::milliseconds Reducer::backstop_timeout() const {
  // The collective's own deadline comes first, with its diagnosis (the
  // ranks that did not arrive, or the MPI stall report); this is the backstop.
  return comm_.options().timeout + std::chrono::seconds(10);
}

Tensor Reducer::shard_gradient(size_t bucket) const {
  if (options_.zero_stage == 0) TANDEM_THROW(Error, "Reducer::shard_gradient without ZeRO");
  if (options_.zero_stage == 2) return shards_.at(bucket);
  const int64_t shard = bucketer_->bucket_elements(bucket) / comm_.size();
  return bucketer_->bucket(bucket).slice(comm_.rank() * shard, (comm_.rank() + 1) * shard);
}

void Reducer::prepare(bool synchronize, bool accumulate, bool measure_norms) {
  if (options_.zero_stage == 2 && !synchronize) {
    TANDEM_THROW(InvalidArgument,
                 "ZeRO stage 2 keeps no whole gradient to accumulate into: every backward pass "
                 "must synchronise (accumulate into the shard instead)");
  }
  synchronize_ = synchronize;
  accumulate_ = accumulate && options_.zero_stage == 2;
  measure_norms_ = measure_norms;
  active_ = true;
  next_launch_ = 0;
  ready_.assign(parameters_.size(), false);
  for (size_t b = 0; b < pending_.size(); ++b)
    pending_[b] = static_cast<int>(bucketer_->tensors_in(b).size());
  last_ = ReducerStats{};
  if (options_.zero_stage == 2) {
    // finish() waited for every bucket: the first slots are free.
    slot_taken_.assign(slot_taken_.size(), false);
    staged_.assign(staged_.size(), false);
    for (size_t b = 0; b < std::min(slots_.size(), slot_taken_.size()); ++b) take_slot(b);
  }
}

void Reducer::on_ready(size_t parameter) {
  if (!active_ || !synchronize_ || ready_[parameter]) return;
  // ZeRO-2: a gradient whose bucket holds its slot is final there (or is
  // copied there) and released now, whatever the overlap setting.
  if (options_.zero_stage == 2 && slot_taken_[bucket_of_parameter_[parameter]])
    stage_gradient(parameter);
  if (!options_.overlap) return;
  ready_[parameter] = true;
  if (--pending_[bucket_of_parameter_[parameter]] == 0) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  while (next_launch_ < pending_.size() && pending_[next_launch_] == 0) launch(next_launch_++);
}

void Reducer::wait_for_slot(size_t bucket) {
  if (slot_taken_[bucket]) return;
  // The slot's previous bucket has launched (buckets launch in order and
  // this one comes later), so waiting for it cannot deadlock.
  if (std::shared_ptr<comm::Work>& w = works_[bucket - slots_.size()]) w->wait(backstop_timeout());
  take_slot(bucket);
}

void Reducer::take_slot(size_t bucket) {
  slot_taken_[bucket] = true;
  // Backward writes the gradients of this bucket's parameters straight into
  // the slot from now on; a gradient already accumulated elsewhere is
  // copied in by set_grad_buffer.
  const size_t n = parameters_.size();
  const Tensor& slot = slots_[bucket % slots_.size()];
  for (size_t layout_index : bucketer_->tensors_in(bucket)) {
    const size_t i = n - 1 - layout_index;
    if (staged_[i]) continue;
    const int64_t offset = bucketer_->offset_of(layout_index);
    parameters_[i].set_grad_buffer(slot.slice(offset, offset + parameters_[i].value().numel())
                                       .reshape(parameters_[i].shape()));
  }
}

void Reducer::stage_gradient(size_t parameter) {
  if (staged_[parameter]) return;
  staged_[parameter] = true;
  const size_t n = parameters_.size();
  const size_t layout_index = n - 1 - parameter;
  const size_t bucket = bucket_of_parameter_[parameter];
  const int64_t offset = bucketer_->offset_of(layout_index);
  Variable& p = parameters_[parameter];
  Tensor target = slots_[bucket % slots_.size()].slice(offset, offset + p.value().numel());
  if (p.has_grad()) {
    if (p.grad().device_data() != target.device_data())
      target.copy_from(p.grad().reshape(target.shape()));
  } else {
    target.zero();  // no gradient this pass: contributes zero
  }
  p.release_grad_buffer();
}

void Reducer::launch(size_t bucket) {
  if (options_.zero_stage == 2) {
    launch_reduce_scatter(bucket);
    return;
  }
  // Parameters of this bucket that got no gradient this step contribute zero.
  const size_t n = parameters_.size();
  for (size_t layout_index : bucketer_->tensors_in(bucket)) {
    Variable& p = parameters_[n - 1 - layout_index];
    if (!p.has_grad()) {
      Tensor view = bucketer_->view(layout_index);
      view.zero();
    }
  }
  const Tensor& buffer = bucketer_->bucket(bucket);
  if (measure_norms_) last_.local_squares += kernels::squared_norm(buffer);
  const Tensor& wire = staging_.empty() ? buffer : staging_[bucket];
  if (!staging_.empty()) Tensor(wire).copy_from(buffer);
  if (options_.overlap) {
    works_[bucket] = comm_.all_reduce_async(wire, wire, comm::ReduceOp::sum);
  } else {
    const auto start = std::chrono::steady_clock::now();
    comm_.all_reduce(wire, comm::ReduceOp::sum);
    last_.buckets.push_back(
        {static_cast<int64_t>(wire.nbytes()),
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
         comm_.all_reduce_algorithm(static_cast<int64_t>(wire.nbytes()))});
  }
  ++last_.buckets_launched;
  last_.bytes_reduced += static_cast<int64_t>(buffer.nbytes());
}

void Reducer::launch_reduce_scatter(size_t bucket) {
  wait_for_slot(bucket);
  const size_t n = parameters_.size();
  for (size_t layout_index : bucketer_->tensors_in(bucket)) stage_gradient(n - 1 - layout_index);
  const int64_t elements = bucketer_->bucket_elements(bucket);
  const Tensor input = slots_[bucket % slots_.size()].slice(0, elements);
  const int64_t padding = bucketer_->padding(bucket);
  if (padding > 0) {
    Tensor tail = input.slice(elements - padding, elements);
    tail.zero();
  }
  if (measure_norms_) last_.local_squares += kernels::squared_norm(input);
  Tensor& output = shards_[bucket];
  if (accumulate_) {
    // The earlier passes' sum joins this rank's own chunk of the input: the
    // reduce-scatter then adds it to this pass's sum over the ranks.
    const int64_t shard = output.numel();
    Tensor mine = input.slice(comm_.rank() * shard, (comm_.rank() + 1) * shard);
    kernels::add_into(mine, output);
  }
  if (options_.overlap) {
    works_[bucket] = comm_.reduce_scatter_async(input, output, comm::ReduceOp::sum);
  } else {
    const auto start = std::chrono::steady_clock::now();
    comm_.reduce_scatter(input, output, comm::ReduceOp::sum);
    last_.buckets.push_back(
        {static_cast<int64_t>(input.nbytes()),
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
         "reduce_scatter"});
  }
  ++last_.buckets_launched;
  last_.bytes_reduced += static_cast<int64_t>(input.nbytes());
  // The next buckets' gradients come next in backward (a layer's weight and
  // bias can fall in consecutive buckets, computed by one node): give them
  // their slots now, so that they are computed into them instead of into
  // buffers of their own. This waits for the reduce-scatters of the buckets
  // before this one.
  for (size_t next = bucket + 1; next < std::min(bucket + slots_.size(), slot_taken_.size());
       ++next)
    wait_for_slot(next);
}

void Reducer::record(size_t bucket, const comm::Work& work) {
  const int64_t bytes =
      staging_.empty() ? bucketer_->bucket_elements(bucket) * static_cast<int64_t>(sizeof(float))
                       : static_cast<int64_t>(staging_[bucket].nbytes());
  last_.buckets.push_back({bytes,
                           std::chrono::duration<double>(work.finished() - work.started()).count(),
                           options_.zero_stage == 2 ? std::string_view("reduce_scatter")
                                                    : comm_.all_reduce_algorithm(bytes)});
}

void Reducer::finish() {
  if (!active_) TANDEM_THROW(Error, "Reducer::finish without prepare");
  active_ = false;
  if (!synchronize_) return;
  // Buckets whose parameters were not all reached by backward.
  for (size_t b = next_launch_; b < pending_.size(); ++b) launch(b);
  next_launch_ = pending_.size();
  for (size_t b = 0; b < works_.size(); ++b) {
    if (works_[b]) {
      works_[b]->wait(backstop_timeout());
      record(b, *works_[b]);
      works_[b].reset();
    }
    if (!staging_.empty()) {
      const Tensor& buffer = bucketer_->bucket(b);
      Tensor(buffer).copy_from(staging_[b]);
    }
  }
  // Stage 2 keeps no parameter gradient: the shards are the result.
  if (options_.zero_stage != 2)
    for (Variable& p : parameters_) p.define_grad();
  if (measure_norms_) {
    // Every replica holds the same reduced buckets: each measures its share
    // of them (bucket b on rank b mod N), and the shares add up. Under
    // ZeRO-2 each measures its own shards.
    for (size_t b = 0; b < pending_.size(); ++b) {
      if (options_.zero_stage == 2) {
        last_.reduced_squares += kernels::squared_norm(shards_[b]);
      } else if (static_cast<int>(b % static_cast<size_t>(comm_.size())) == comm_.rank()) {
        last_.reduced_squares += kernels::squared_norm(bucketer_->bucket(b));
      }
    }
  }
}

}  // namespace tandem::distribute
