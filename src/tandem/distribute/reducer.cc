#include "tandem/distribute/reducer.h"

#include <chrono>

#include "tandem/base/error.h"
#include "tandem/tensor/convert.h"

namespace tandem::distribute {
namespace {

// Gradient buckets live on the parameters' device.
Device device_of(const std::vector<Variable>& parameters) {
  return parameters.empty() ? current_device() : parameters.front().value().device();
}

}  // namespace

Reducer::Reducer(std::vector<Variable> parameters, comm::Communicator& comm, ReducerOptions options)
    : parameters_(std::move(parameters)), comm_(comm), options_(options) {
  // Reverse order: the last layer's gradients are ready first.
  std::vector<comm::TensorLayout> layouts;
  for (auto it = parameters_.rbegin(); it != parameters_.rend(); ++it) {
    if (it->dtype() != DType::f32) {
      TANDEM_THROW(InvalidArgument, "Reducer: parameter '", it->name(), "' is ",
                   dtype_name(it->dtype()), "; master weights must be f32");
    }
    layouts.push_back({it->shape(), it->dtype()});
  }
  bucketer_ = std::make_unique<comm::Bucketer>(
      layouts, comm::BucketerOptions{.bucket_bytes = options.bucket_bytes,
                                     .first_bucket_bytes = options.first_bucket_bytes,
                                     .category = MemoryCategory::gradients,
                                     .device = device_of(parameters_)});
  const size_t n = parameters_.size();
  bucket_of_parameter_.resize(n);
  ready_.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    const size_t layout_index = n - 1 - i;
    bucket_of_parameter_[i] = bucketer_->bucket_of(layout_index);
    parameters_[i].set_grad_buffer(bucketer_->view(layout_index));
    parameters_[i].add_grad_ready_hook([this, i](Variable&) { on_ready(i); });
  }
  pending_.resize(bucketer_->bucket_count());
  works_.resize(bucketer_->bucket_count());
  if (options.wire != comm::WireDType::f32) {
    const DType wire = options.wire == comm::WireDType::bf16 ? DType::bf16 : DType::f16;
    for (size_t b = 0; b < bucketer_->bucket_count(); ++b) {
      staging_.push_back(Tensor::empty(Shape{bucketer_->bucket(b).numel()}, wire,
                                       device_of(parameters_), MemoryCategory::communication));
    }
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

void Reducer::prepare(bool synchronize) {
  synchronize_ = synchronize;
  active_ = true;
  next_launch_ = 0;
  ready_.assign(parameters_.size(), false);
  for (size_t b = 0; b < pending_.size(); ++b)
    pending_[b] = static_cast<int>(bucketer_->tensors_in(b).size());
  last_ = ReducerStats{};
}

void Reducer::on_ready(size_t parameter) {
  if (!active_ || !synchronize_ || !options_.overlap || ready_[parameter]) return;
  ready_[parameter] = true;
  if (--pending_[bucket_of_parameter_[parameter]] == 0) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  while (next_launch_ < pending_.size() && pending_[next_launch_] == 0) launch(next_launch_++);
}

void Reducer::launch(size_t bucket) {
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
  const Tensor& wire = staging_.empty() ? buffer : staging_[bucket];
  if (!staging_.empty())
    convert(buffer.raw_data(), DType::f32, wire.raw_data(), wire.dtype(), buffer.numel());
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
      const Tensor& wire = staging_.empty() ? bucketer_->bucket(b) : staging_[b];
      last_.buckets.push_back(
          {static_cast<int64_t>(wire.nbytes()),
           std::chrono::duration<double>(works_[b]->finished() - works_[b]->started()).count(),
           comm_.all_reduce_algorithm(static_cast<int64_t>(wire.nbytes()))});
      works_[b].reset();
    }
    if (!staging_.empty()) {
      const Tensor& buffer = bucketer_->bucket(b);
      convert(staging_[b].raw_data(), staging_[b].dtype(), buffer.raw_data(), DType::f32,
              buffer.numel());
    }
  }
  for (Variable& p : parameters_) p.define_grad();
}

}  // namespace tandem::distribute
