#include "tandem/comm/bucketer.h"

#include "tandem/base/error.h"

namespace tandem::comm {

Bucketer::Bucketer(const std::vector<TensorLayout>& tensors, const BucketerOptions& options)
    : layouts_(tensors), placement_(tensors.size()) {
  if (options.bucket_bytes <= 0 || options.first_bucket_bytes <= 0) {
    TANDEM_THROW(InvalidArgument, "bucket sizes must be positive, got ", options.bucket_bytes,
                 " and ", options.first_bucket_bytes, " bytes");
  }
  if (options.pad_to < 1)
    TANDEM_THROW(InvalidArgument, "bucket padding must be positive, got ", options.pad_to);
  struct Open {
    DType dtype = DType::f32;
    int64_t elements = 0;
    std::vector<size_t> members;
  };
  std::vector<Open> open;  // buckets being filled, in order
  auto limit = [&](size_t bucket) {
    return bucket == 0 ? options.first_bucket_bytes : options.bucket_bytes;
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t elements = tensors[i].shape.numel();
    // PyTorch DDP's rule: a bucket takes tensors until it has reached its
    // size, the one that crosses it included.
    const bool fits = !open.empty() && open.back().dtype == tensors[i].dtype &&
                      static_cast<int64_t>(open.back().elements * dtype_size(open.back().dtype)) <
                          limit(open.size() - 1);
    if (!fits) open.push_back({tensors[i].dtype, 0, {}});
    placement_[i] = {open.size() - 1, open.back().elements};
    open.back().elements += elements;
    open.back().members.push_back(i);
  }
  for (const Open& b : open) {
    const int64_t padded = (b.elements + options.pad_to - 1) / options.pad_to * options.pad_to;
    if (options.allocate)
      buckets_.push_back(Tensor::zeros(Shape{padded}, b.dtype, options.device, options.category));
    members_.push_back(b.members);
    elements_.push_back(padded);
    used_.push_back(b.elements);
  }
}

const Tensor& Bucketer::bucket(size_t b) const {
  if (buckets_.empty() && !members_.empty())
    TANDEM_THROW(Error, "Bucketer: bucket buffers were not allocated (layout only)");
  return buckets_.at(b);
}

int64_t Bucketer::padding(size_t b) const {
  return elements_.at(b) - used_.at(b);
}

Bucketer Bucketer::with_new_buffers(MemoryCategory category, Device device) const {
  Bucketer copy = *this;
  copy.buckets_.clear();
  for (size_t b = 0; b < members_.size(); ++b) {
    const DType dtype = members_[b].empty() ? DType::f32 : layouts_[members_[b].front()].dtype;
    copy.buckets_.push_back(Tensor::zeros(Shape{elements_[b]}, dtype, device, category));
  }
  return copy;
}

Tensor Bucketer::view(size_t tensor) const {
  const auto [bucket, offset] = placement_.at(tensor);
  return this->bucket(bucket)
      .slice(offset, offset + layouts_[tensor].shape.numel())
      .reshape(layouts_[tensor].shape);
}

}  // namespace tandem::comm
