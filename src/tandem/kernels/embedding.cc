#include "tandem/kernels/embedding.h"

#include <cstring>
#include <vector>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/checks.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/float_io.h"

namespace tandem::kernels {
namespace {

// Both passes index rows with the indices: their values are checked (read
// back from a device) on every device.
void check_indices(const char* op, const Tensor& indices, int64_t vocabulary) {
  detail::check_index_values(op, indices, vocabulary, "index", "position");
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  detail::check_same_device("embedding", weight, {&indices});
  if (weight.rank() != 2 || !is_floating(weight.dtype())) {
    TANDEM_THROW(ShapeError, "embedding: weight must be a floating (V, D) table, got ",
                 weight.to_string());
  }
  const int64_t V = weight.dim(0), D = weight.dim(1);
  check_indices("embedding", indices, V);
  TANDEM_DISPATCH_CUDA(weight, embedding(weight, indices));
  std::vector<int64_t> dims = indices.shape().to_vector();
  dims.push_back(D);
  Tensor out = Tensor::empty(Shape(dims), weight.dtype(), weight.device());
  const size_t row_bytes = static_cast<size_t>(D) * dtype_size(weight.dtype());
  const auto* table = static_cast<const char*>(weight.raw_data());
  auto* o = static_cast<char*>(out.raw_data());
  const int32_t* idx = indices.data<int32_t>();
  parallel_for(indices.numel(), 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      std::memcpy(o + i * row_bytes, table + idx[i] * row_bytes, row_bytes);
    }
  });
  return out;
}

Tensor embedding_backward(const Tensor& dy, const Tensor& indices, int64_t vocabulary) {
  detail::check_same_device("embedding_backward", dy, {&indices});
  check_indices("embedding_backward", indices, vocabulary);
  const int64_t count = indices.numel();
  // dy is indices' shape plus the embedding's width.
  bool matches = dy.rank() == indices.rank() + 1;
  for (int d = 0; matches && d < indices.rank(); ++d) matches = dy.dim(d) == indices.dim(d);
  if (!matches) {
    TANDEM_THROW(ShapeError, "embedding_backward: dy ", dy.to_string(),
                 " must be indices' shape and a width, indices are ", indices.to_string());
  }
  TANDEM_DISPATCH_CUDA(dy, embedding_backward(dy, indices, vocabulary));
  const int64_t D = dy.dim(-1);
  Tensor grad = Tensor::zeros(Shape{vocabulary, D}, DType::f32, dy.device());
  float* g = grad.data<float>();
  const int32_t* idx = indices.data<int32_t>();
  detail::dispatch_floating(dy.dtype(), "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* d = static_cast<const T*>(dy.raw_data());
    // Split over the embedding dimension so that no two threads add into the
    // same element and every element sums its rows in index order.
    parallel_for(D, 64, [&](int64_t c0, int64_t c1) {
      for (int64_t i = 0; i < count; ++i) {
        float* row = g + static_cast<int64_t>(idx[i]) * D;
        const T* src = d + i * D;
        for (int64_t c = c0; c < c1; ++c) row[c] += detail::to_f32(src[c]);
      }
    });
  });
  return grad;
}

}  // namespace tandem::kernels
