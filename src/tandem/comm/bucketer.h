#pragma once
// Fusion buckets (Horovod's tensor fusion, DDP's gradient_as_bucket_view):
// many small tensors laid out in a few flat buffers so that one collective
// serves them all, each tensor being a view into its bucket (no packing copy).
// Tensors are placed in the order given (a model's gradients in reverse
// parameter order, the order backward produces them); as in PyTorch DDP, a
// bucket takes tensors until it has reached its size (the tensor that
// crosses it included), and the first bucket is smaller so that the first
// all-reduce can start early. (Closing a bucket before the tensor that would
// cross its size, as tandem did before, left a model whose last layers are
// small and the next large with a first bucket of the small ones and
// everything else in one bucket sent after backward.)

#include <cstdint>
#include <utility>
#include <vector>

#include "tandem/tensor/tensor.h"

namespace tandem::comm {

struct BucketerOptions {
  int64_t bucket_bytes = int64_t{25} << 20;
  int64_t first_bucket_bytes = int64_t{1} << 20;
  MemoryCategory category = MemoryCategory::gradients;
  Device device = cpu_device();
  // Each bucket's element count is rounded up to a multiple of this (> 0)
  // with zeros at its end: ZeRO passes the replica count, so that every
  // replica's shard of a bucket has the same size.
  int64_t pad_to = 1;
  // false: the layout only, no buffers (bucket() and view() throw); for a
  // reducer that stages each bucket through a shared buffer (ZeRO-2).
  bool allocate = true;
};

struct TensorLayout {
  Shape shape;
  DType dtype = DType::f32;
};

class Bucketer {
 public:
  // Throws InvalidArgument for non-positive bucket sizes. Tensors of different
  // dtypes never share a bucket; a bucket holds at most its size plus one tensor.
  explicit Bucketer(const std::vector<TensorLayout>& tensors, const BucketerOptions& options = {});

  size_t bucket_count() const { return members_.size(); }
  // The flat (1-D) buffer of bucket b.
  const Tensor& bucket(size_t b) const;
  // Elements of bucket b, padding included.
  int64_t bucket_elements(size_t b) const { return elements_.at(b); }
  // Indices (into the constructor's list) of the tensors in bucket b, in layout order.
  const std::vector<size_t>& tensors_in(size_t b) const { return members_.at(b); }
  size_t bucket_of(size_t tensor) const { return placement_.at(tensor).first; }
  // Element offset of a tensor inside its bucket.
  int64_t offset_of(size_t tensor) const { return placement_.at(tensor).second; }
  // A view of tensor i's elements in its bucket, with its shape.
  Tensor view(size_t tensor) const;
  size_t tensor_count() const { return layouts_.size(); }
  // Elements of bucket b that belong to no tensor (the padding at its end).
  int64_t padding(size_t b) const;
  // The same layout over new zeroed buffers (ZeRO keeps the parameters in
  // buckets laid out like the gradients').
  Bucketer with_new_buffers(MemoryCategory category, Device device) const;

 private:
  std::vector<TensorLayout> layouts_;
  std::vector<Tensor> buckets_;
  std::vector<std::vector<size_t>> members_;
  std::vector<std::pair<size_t, int64_t>> placement_;  // (bucket, element offset)
  std::vector<int64_t> elements_;                      // per bucket, padded
  std::vector<int64_t> used_;                          // per bucket: elements of tensors
};

}  // namespace tandem::comm
