#include "tandem/kernels/layout.h"

#include <cstring>

#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/float_io.h"

namespace tandem::kernels {
namespace {

// A slab view of x around axis: outer blocks, each of `length` rows along
// axis of `inner` bytes.
struct Slabs {
  int64_t outer = 1, length = 0, inner = 1;
};

Slabs slabs_of(const Shape& shape, int axis, size_t element) {
  Slabs s;
  for (int i = 0; i < axis; ++i) s.outer *= shape.dim(i);
  s.length = shape.dim(axis);
  for (int i = axis + 1; i < shape.rank(); ++i) s.inner *= shape.dim(i);
  s.inner *= static_cast<int64_t>(element);
  return s;
}

// Copies `rows` rows of `inner` bytes from each outer block of src (block
// stride src_rows rows, starting at row src_at) to dst likewise.
void copy_rows(const Tensor& src, int64_t src_rows, int64_t src_at, const Tensor& dst,
               int64_t dst_rows, int64_t dst_at, int64_t rows, int64_t outer, int64_t inner) {
  const int64_t bytes = rows * inner;
  if (bytes == 0) return;
  if (src.device() != dst.device()) {
    TANDEM_THROW(InvalidArgument, "layout copy between ", src.device().to_string(), " and ",
                 dst.device().to_string(), " (move one with Tensor::to(Device))");
  }
  TANDEM_DISPATCH_CUDA(
      dst, copy_rows(dst.device(), static_cast<const char*>(src.device_data()) + src_at * inner,
                     src_rows * inner, static_cast<char*>(dst.device_data()) + dst_at * inner,
                     dst_rows * inner, bytes, outer));
  const char* from = static_cast<const char*>(src.raw_data());
  char* to = static_cast<char*>(dst.raw_data());
  parallel_for(outer, std::max<int64_t>(1, detail::kPointwiseGrain / std::max<int64_t>(bytes, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t o = begin; o < end; ++o) {
                   std::memcpy(to + (o * dst_rows + dst_at) * inner,
                               from + (o * src_rows + src_at) * inner, static_cast<size_t>(bytes));
                 }
               });
}

}  // namespace

int normalize_axis(int axis, int rank) {
  const int a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    TANDEM_THROW(ShapeError, "axis ", axis, " is out of range for rank ", rank);
  return a;
}

std::vector<int> inverse_permutation(std::span<const int> order) {
  const int n = static_cast<int>(order.size());
  std::vector<int> inverse(order.size(), -1);
  for (int i = 0; i < n; ++i) {
    const int o = order[static_cast<size_t>(i)];
    if (o < 0 || o >= n || inverse[static_cast<size_t>(o)] >= 0) {
      std::string text;
      for (int v : order) text += (text.empty() ? "" : ", ") + std::to_string(v);
      TANDEM_THROW(ShapeError, "(", text, ") is not a permutation of 0..", n - 1);
    }
    inverse[static_cast<size_t>(o)] = i;
  }
  return inverse;
}

Tensor permute(const Tensor& x, std::span<const int> order) {
  const int rank = x.rank();
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  bool valid = static_cast<int>(order.size()) == rank;
  for (size_t i = 0; valid && i < order.size(); ++i) {
    valid = order[i] >= 0 && order[i] < rank && !seen[static_cast<size_t>(order[i])];
    if (valid) seen[static_cast<size_t>(order[i])] = true;
  }
  if (!valid) {
    std::string text;
    for (int o : order) text += (text.empty() ? "" : ", ") + std::to_string(o);
    TANDEM_THROW(ShapeError, "permute: (", text, ") is not a permutation of the ", rank,
                 " dimensions of ", x.shape().to_string());
  }
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i)
    dims[static_cast<size_t>(i)] = x.dim(order[static_cast<size_t>(i)]);
  Tensor y = Tensor::empty(Shape(dims), x.dtype(), x.device());
  if (x.numel() == 0) return y;
  // Trailing dimensions that stay in place move as one contiguous run.
  int kept = rank;
  while (kept > 0 && order[static_cast<size_t>(kept - 1)] == kept - 1) --kept;
  const size_t element = dtype_size(x.dtype());
  int64_t run = static_cast<int64_t>(element);
  for (int i = kept; i < rank; ++i) run *= x.dim(i);
  if (kept == 0) {
    y.copy_from(x);
    return y;
  }
  if (detail::on_cuda(x)) {
    TANDEM_CUDA_ONLY(cuda::permute_into(x, order, kept, y));
    return y;
  }
  // Byte strides of x's dimensions, read in y's order.
  std::vector<int64_t> x_stride(static_cast<size_t>(rank));
  int64_t stride = static_cast<int64_t>(element);
  for (int i = rank - 1; i >= 0; --i) {
    x_stride[static_cast<size_t>(i)] = stride;
    stride *= x.dim(i);
  }
  int64_t runs = 1;
  for (int i = 0; i < kept; ++i) runs *= dims[static_cast<size_t>(i)];
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(y.raw_data());
  parallel_for(
      runs, std::max<int64_t>(1, detail::kPointwiseGrain / run), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          // r's coordinates in y's first `kept` dimensions.
          int64_t rest = r, offset = 0;
          for (int i = kept - 1; i >= 0; --i) {
            const int64_t d = dims[static_cast<size_t>(i)];
            offset += (rest % d) * x_stride[static_cast<size_t>(order[static_cast<size_t>(i)])];
            rest /= d;
          }
          std::memcpy(dst + r * run, src + offset, static_cast<size_t>(run));
        }
      });
  return y;
}

Tensor slice(const Tensor& x, int axis, int64_t begin, int64_t end) {
  const int a = normalize_axis(axis, x.rank());
  if (begin < 0 || begin > end || end > x.dim(a)) {
    TANDEM_THROW(ShapeError, "slice [", begin, ", ", end, ") is out of range for dimension ", a,
                 " of ", x.shape().to_string());
  }
  std::vector<int64_t> dims(x.shape().dims().begin(), x.shape().dims().end());
  dims[static_cast<size_t>(a)] = end - begin;
  Tensor y = Tensor::empty(Shape(dims), x.dtype(), x.device());
  const Slabs s = slabs_of(x.shape(), a, dtype_size(x.dtype()));
  copy_rows(x, s.length, begin, y, end - begin, 0, end - begin, s.outer, s.inner);
  return y;
}

Tensor unslice(const Tensor& dy, const Shape& shape, int axis, int64_t begin) {
  const int a = normalize_axis(axis, shape.rank());
  if (dy.rank() != shape.rank() || begin < 0 || begin + dy.dim(a) > shape.dim(a)) {
    TANDEM_THROW(ShapeError, "unslice: ", dy.shape().to_string(), " at ", begin,
                 " does not fit dimension ", a, " of ", shape.to_string());
  }
  Tensor dx = Tensor::zeros(shape, dy.dtype(), dy.device());
  const Slabs s = slabs_of(shape, a, dtype_size(dy.dtype()));
  copy_rows(dy, dy.dim(a), 0, dx, s.length, begin, dy.dim(a), s.outer, s.inner);
  return dx;
}

Tensor concat(std::span<const Tensor> parts, int axis) {
  if (parts.empty()) TANDEM_THROW(ShapeError, "concat needs at least one tensor");
  const Tensor& first = parts[0];
  const int a = normalize_axis(axis, first.rank());
  int64_t total = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    const Tensor& t = parts[p];
    bool fits = t.rank() == first.rank() && t.dtype() == first.dtype();
    for (int i = 0; fits && i < t.rank(); ++i) fits = i == a || t.dim(i) == first.dim(i);
    if (!fits) {
      TANDEM_THROW(ShapeError, "concat along dimension ", a, ": part ", p, " ", t.to_string(),
                   " does not fit part 0 ", first.to_string());
    }
    total += t.dim(a);
  }
  std::vector<int64_t> dims(first.shape().dims().begin(), first.shape().dims().end());
  dims[static_cast<size_t>(a)] = total;
  Tensor y = Tensor::empty(Shape(dims), first.dtype(), first.device());
  const Slabs s = slabs_of(y.shape(), a, dtype_size(y.dtype()));
  int64_t at = 0;
  for (const Tensor& t : parts) {
    copy_rows(t, t.dim(a), 0, y, total, at, t.dim(a), s.outer, s.inner);
    at += t.dim(a);
  }
  return y;
}

Tensor expand_axis(const Tensor& x, int axis, int64_t size) {
  if (size < 0) TANDEM_THROW(ShapeError, "expand_axis: size must be >= 0, got ", size);
  const int a = normalize_axis(axis, x.rank() + 1);
  std::vector<int64_t> dims = x.shape().to_vector();
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < a; ++d) outer *= dims[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(a); d < dims.size(); ++d) inner *= dims[d];
  dims.insert(dims.begin() + a, size);
  Tensor out = Tensor::empty(Shape(dims), x.dtype(), x.device());
  const size_t row = static_cast<size_t>(inner) * dtype_size(x.dtype());
  const auto* in = static_cast<const char*>(x.raw_data());
  auto* o = static_cast<char*>(out.raw_data());
  parallel_for(outer * size, 64, [&](int64_t first, int64_t last) {
    for (int64_t j = first; j < last; ++j) {
      if (row > 0)
        std::memcpy(o + static_cast<size_t>(j) * row, in + static_cast<size_t>(j / size) * row,
                    row);
    }
  });
  return out;
}

}  // namespace tandem::kernels
