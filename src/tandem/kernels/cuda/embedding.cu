// Embedding lookup and its backward. The backward adds each table row's
// gradients in index order, the CPU's order, so the two agree to the last
// bit in f32 and runs are deterministic; no atomics. For parallelism the
// table's rows are split into ranges and the columns into blocks of
// threads: a block owns one range of rows and kThreads columns, scans all
// the indices, and adds the rows of dy whose index falls in its range (each
// element of dy is read by one block; the indices by every block, from L2).
// One thread per column alone used 3 of 132 multiprocessors for a
// 768-wide table.
#include <algorithm>
#include <vector>

#include "tandem/kernels/cuda/kernels.h"
#include "tandem/tensor/cuda/elements.cuh"
#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

constexpr unsigned int kThreads = 256;

template <typename T>
__global__ void gather_kernel(const T* table, const int32_t* idx, T* out, int64_t n, int64_t d) {
  TANDEM_CUDA_FOR(i, n) out[i] = table[static_cast<int64_t>(idx[i / d]) * d + i % d];
}

template <typename T>
__global__ void scatter_rows_kernel(const T* dy, const int32_t* idx, int64_t count, int64_t d,
                                    int64_t rows_per_range, float* grad) {
  // The indices pass through shared memory a block's width at a time: a
  // dependent global load per index made the scan latency-bound.
  __shared__ int32_t staged[kThreads];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * rows_per_range;
  for (int64_t base = 0; base < count; base += kThreads) {
    const int64_t n = count - base < kThreads ? count - base : kThreads;
    __syncthreads();
    if (threadIdx.x < n) staged[threadIdx.x] = idx[base + threadIdx.x];
    __syncthreads();
    if (c >= d) continue;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t row = staged[k];
      if (row >= first && row < first + rows_per_range) {
        grad[row * d + c] += load(dy, (base + k) * d + c);
      }
    }
  }
}

// Every block scans all the indices, so the scan's cost grows with the
// block count: about one block per multiprocessor of a large GPU (1024
// blocks made the scan, not the additions, the cost); a range of at least
// one row.
int64_t rows_per_range(int64_t vocabulary, int64_t column_blocks) {
  constexpr int64_t kWantedBlocks = 128;
  const int64_t ranges =
      std::clamp<int64_t>(kWantedBlocks / std::max<int64_t>(column_blocks, 1), 1, 65535);
  return std::max<int64_t>(1, (vocabulary + ranges - 1) / ranges);
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  // Operands and index values checked by kernels::embedding.
  const int64_t D = weight.dim(1);
  std::vector<int64_t> dims = indices.shape().to_vector();
  dims.push_back(D);
  Tensor out = Tensor::empty(Shape(dims), weight.dtype(), weight.device());
  const int64_t n = out.numel();
  if (n == 0) return out;
  DeviceGuard guard(weight.device());
  dispatch_float(weight.dtype(), "embedding", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    gather_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream(weight.device())>>>(
        static_cast<const T*>(weight.device_data()),
        static_cast<const int32_t*>(indices.device_data()), static_cast<T*>(out.device_data()), n,
        D);
  });
  check_launch("embedding");
  return out;
}

Tensor embedding_backward(const Tensor& dy, const Tensor& indices, int64_t vocabulary) {
  // Operands and index values checked by kernels::embedding_backward.
  const int64_t count = indices.numel();
  const int64_t D = dy.dim(-1);
  Tensor grad = Tensor::zeros(Shape{vocabulary, D}, DType::f32, dy.device());
  if (count == 0 || D == 0) return grad;
  DeviceGuard guard(dy.device());
  const int64_t column_blocks = (D + kThreads - 1) / kThreads;
  const int64_t range = rows_per_range(vocabulary, column_blocks);
  const dim3 grid(static_cast<unsigned int>(column_blocks),
                  static_cast<unsigned int>((vocabulary + range - 1) / range));
  dispatch_float(dy.dtype(), "embedding_backward", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    scatter_rows_kernel<T><<<grid, kThreads, 0, stream(dy.device())>>>(
        static_cast<const T*>(dy.device_data()), static_cast<const int32_t*>(indices.device_data()),
        count, D, range, static_cast<float*>(grad.device_data()));
  });
  check_launch("embedding_backward");
  return grad;
}

}  // namespace tandem::cuda
