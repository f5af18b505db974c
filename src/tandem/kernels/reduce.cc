#include "tandem/kernels/reduce.h"

#include <limits>
#include <type_traits>
#include <vector>

#include "tandem/base/parallel.h"
#include "tandem/base/target_clones.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/float_io.h"
#include "tandem/kernels/elementwise.h"
#include "tandem/kernels/layout.h"

namespace tandem::kernels {
namespace {

using detail::dispatch_floating;
using detail::to_f32;

// Fixed block size: partial sums per block, added in block order.
constexpr int64_t kBlock = 1 << 14;

double sum_as_double(const Tensor& x) {
  const int64_t n = x.numel();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  dispatch_floating(x.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x.raw_data());
    parallel_for(blocks, 1, [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) {
        double acc = 0.0;
        const int64_t end = std::min(n, (b + 1) * kBlock);
        for (int64_t i = b * kBlock; i < end; ++i) acc += to_f32(p[i]);
        partial[static_cast<size_t>(b)] = acc;
      }
    });
  });
  double total = 0.0;
  for (double v : partial) total += v;
  return total;
}

// f32 lanes inside a block (so that the loop vectorises), double across lanes and blocks.
TANDEM_TARGET_CLONES double block_squares(const float* __restrict p, int64_t n) {
  constexpr int kLanes = 16;
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] += p[i + k] * p[i + k];
  double s = 0.0;
  for (float lane : lanes) s += lane;
  for (; i < n; ++i) s += static_cast<double>(p[i]) * p[i];
  return s;
}

}  // namespace

double squared_norm(const Tensor& x) {
  TANDEM_DISPATCH_CUDA(x, squared_norm(x));
  const int64_t n = x.numel();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  dispatch_floating(x.dtype(), "squared_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x.raw_data());
    parallel_for(blocks, 1, [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) {
        const int64_t begin = b * kBlock, end = std::min(n, (b + 1) * kBlock);
        if constexpr (std::is_same_v<T, float>) {
          partial[static_cast<size_t>(b)] = block_squares(p + begin, end - begin);
        } else {
          double acc = 0.0;
          for (int64_t i = begin; i < end; ++i) {
            const double v = to_f32(p[i]);
            acc += v * v;
          }
          partial[static_cast<size_t>(b)] = acc;
        }
      }
    });
  });
  double total = 0.0;
  for (double v : partial) total += v;
  return total;
}

Tensor sum(const Tensor& x) {
  TANDEM_DISPATCH_CUDA(x, sum(x));
  return Tensor::full(Shape{}, static_cast<float>(sum_as_double(x)), DType::f32, x.device());
}

Tensor mean(const Tensor& x) {
  TANDEM_DISPATCH_CUDA(x, mean(x));
  const float value = x.numel() == 0 ? std::numeric_limits<float>::quiet_NaN()
                                     : static_cast<float>(sum_as_double(x) / x.numel());
  return Tensor::full(Shape{}, value, DType::f32, x.device());
}

namespace {

// Rows are added kRowBlock at a time, each column's double sum kept in
// registers across the block (the row-by-row loop loaded and stored it per
// row: gpt's bias gradients took 3.5% of its bf16 step).
constexpr int64_t kRowBlock = 16;

// acc[c] += row r's value at column c for the `rows` rows (row stride
// `stride`), c < n, in double, in row order; cloned per ISA for each type.
template <typename T>
[[gnu::always_inline]] inline void add_rows_body(const T* __restrict p, int64_t rows,
                                                 int64_t stride, int64_t n,
                                                 double* __restrict acc) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) acc[c] += static_cast<double>(to_f32(p[r * stride + c]));
}
// `Strips` strips of 16 columns each over the rows: 2 x Strips chains of
// double adds in flight (one strip's two chains waited on the adds'
// latency: gpt's bf16 bias gradients ran at 13 GB/s), and the same columns
// of the next block of rows prefetched (the block's rows are as many
// strided streams).
template <int Strips, typename T>
TANDEM_AVX512 void add_strips(const T* p, int64_t rows, int64_t stride, double* acc) {
  __m512d low[Strips], high[Strips];
  for (int s = 0; s < Strips; ++s) {
    low[s] = _mm512_loadu_pd(acc + 16 * s);
    high[s] = _mm512_loadu_pd(acc + 16 * s + 8);
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < 16 * Strips * static_cast<int64_t>(sizeof(T)); b += 64)
      _mm_prefetch(reinterpret_cast<const char*>(p + (r + kRowBlock) * stride) + b, _MM_HINT_T0);
    for (int s = 0; s < Strips; ++s) {
      const __m512 v = detail::load16(p + r * stride + 16 * s);
      low[s] = _mm512_add_pd(low[s], detail::widen8<0>(v));
      high[s] = _mm512_add_pd(high[s], detail::widen8<1>(v));
    }
  }
  for (int s = 0; s < Strips; ++s) {
    _mm512_storeu_pd(acc + 16 * s, low[s]);
    _mm512_storeu_pd(acc + 16 * s + 8, high[s]);
  }
}
// f32 and bf16 on AVX-512 (GCC leaves the Bf16 body scalar); the same sums
// in the same order.
template <typename T>
TANDEM_AVX512 void add_rows_avx512(const T* p, int64_t rows, int64_t stride, int64_t n,
                                   double* acc) {
  int64_t c = 0;
  for (; c + 64 <= n; c += 64) add_strips<4>(p + c, rows, stride, acc + c);
  for (; c + 16 <= n; c += 16) add_strips<1>(p + c, rows, stride, acc + c);
  add_rows_body(p + c, rows, stride, n - c, acc + c);
}
TANDEM_TARGET_CLONES void add_rows(const float* p, int64_t rows, int64_t stride, int64_t n,
                                   double* acc) {
  if (detail::has_avx512()) {
    add_rows_avx512(p, rows, stride, n, acc);
  } else {
    add_rows_body(p, rows, stride, n, acc);
  }
}
TANDEM_TARGET_CLONES void add_rows(const detail::Bf16* p, int64_t rows, int64_t stride, int64_t n,
                                   double* acc) {
  if (detail::has_avx512()) {
    add_rows_avx512(p, rows, stride, n, acc);
  } else {
    add_rows_body(p, rows, stride, n, acc);
  }
}
TANDEM_TARGET_CLONES void add_rows(const detail::F16* p, int64_t rows, int64_t stride, int64_t n,
                                   double* acc) {
  add_rows_body(p, rows, stride, n, acc);
}

}  // namespace

Tensor sum_to_shape(const Tensor& x, const Shape& target) {
  if (x.shape() == target) return x.to(DType::f32);  // no rows to add, on any device
  if (!broadcastable(x.shape(), target)) {
    TANDEM_THROW(ShapeError, "sum_to_shape: ", target.to_string(), " is not a broadcast target of ",
                 x.shape().to_string());
  }
  const int64_t cols = target.numel();
  if (cols == 0) return Tensor::zeros(target, DType::f32, x.device());
  if (cols == 1) return sum(x).reshape(target);
  // Otherwise target is x's trailing dimensions.
  TANDEM_DISPATCH_CUDA(x, sum_to_shape(x, target));
  const int64_t rows = x.numel() / cols;
  Tensor out = Tensor::empty(target, DType::f32, x.device());
  float* o = out.data<float>();
  dispatch_floating(x.dtype(), "sum_to_shape", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x.raw_data());
    // Split over columns: each column is summed over rows in order.
    parallel_for(cols, 256, [&](int64_t c0, int64_t c1) {
      std::vector<double> acc(static_cast<size_t>(c1 - c0), 0.0);
      for (int64_t r = 0; r < rows; r += kRowBlock) {
        add_rows(p + r * cols + c0, std::min(kRowBlock, rows - r), cols, c1 - c0, acc.data());
      }
      for (int64_t c = c0; c < c1; ++c) o[c] = static_cast<float>(acc[static_cast<size_t>(c - c0)]);
    });
  });
  return out;
}

Tensor sum_axis(const Tensor& x, int axis) {
  const int a = normalize_axis(axis, x.rank());
  std::vector<int64_t> dims = x.shape().to_vector();
  const int64_t n = dims[static_cast<size_t>(a)];
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < a; ++d) outer *= x.dim(d);
  for (int d = a + 1; d < x.rank(); ++d) inner *= x.dim(d);
  dims.erase(dims.begin() + a);
  Tensor out = Tensor::empty(Shape(dims), DType::f32, x.device());
  float* o = out.data<float>();
  dispatch_floating(x.dtype(), "sum_axis", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x.raw_data());
    parallel_for(outer * inner, 1024, [&](int64_t first, int64_t last) {
      for (int64_t j = first; j < last; ++j) {
        const int64_t before = j / inner, after = j % inner;
        const T* column = p + before * n * inner + after;
        double acc = 0.0;
        for (int64_t i = 0; i < n; ++i) acc += to_f32(column[i * inner]);
        o[j] = static_cast<float>(acc);
      }
    });
  });
  return out;
}

}  // namespace tandem::kernels
