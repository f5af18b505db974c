// Reductions in double, in an order fixed by the element count alone (a
// fixed grid, then one block over the partial sums), so that a result never
// depends on scheduling: the same input gives the same bits every run.
#include <algorithm>
#include <limits>

#include "tandem/kernels/cuda/column_partials.cuh"
#include "tandem/kernels/cuda/kernels.h"
#include "tandem/tensor/cuda/elements.cuh"
#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

constexpr unsigned int kThreads = 256;
constexpr unsigned int kPartials = 512;  // blocks of the first pass

template <typename T>
__global__ void partial_sums(const T* x, int64_t n, bool squares, double* partial) {
  __shared__ double scratch[kThreads];
  double acc = 0.0;
  TANDEM_CUDA_FOR(i, n) {
    const double v = load(x, i);
    acc += squares ? v * v : v;
  }
  const double total = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// One block: the partials' sum, scaled, as f32 and as double.
__global__ void final_sum(const double* partial, unsigned int count, double factor, float* out,
                          double* out_double) {
  __shared__ double scratch[kThreads];
  double acc = 0.0;
  for (unsigned int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  const double total = block_sum(acc, scratch) * factor;
  if (threadIdx.x == 0) {
    if (out != nullptr) *out = static_cast<float>(total);
    if (out_double != nullptr) *out_double = total;
  }
}

// Column sums of x viewed as (rows, cols), in two passes so that every
// multiprocessor works (one thread per column used 3 of 132 for a 768-wide
// bias gradient and took 42% of a GPT-2-small step). Pass one: a block of
// kTileColumns x kLanes threads sums one chunk of rows for kTileColumns
// columns, each lane a strided subset of the chunk, the lanes then combined
// in a fixed order; pass two adds the chunks' partials per column in chunk
// order. The chunking depends on the shape alone, so results are
// deterministic. With one chunk, pass one writes the f32 result itself.
constexpr unsigned int kTileColumns = 32, kLanes = 8;

int64_t rows_per_chunk(int64_t rows) {
  return std::max<int64_t>(64, (rows + 127) / 128);  // at most 128 chunks
}

template <typename T>
__global__ void column_partials(const T* x, int64_t rows, int64_t cols, int64_t chunk_rows,
                                double* partial, float* out) {
  __shared__ double lanes[kLanes][kTileColumns];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTileColumns + threadIdx.x;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t last = first + chunk_rows < rows ? first + chunk_rows : rows;
  double acc = 0.0;
  if (col < cols) {
    for (int64_t r = first + threadIdx.y; r < last; r += kLanes) acc += load(x, r * cols + col);
  }
  lanes[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || col >= cols) return;
  double total = 0.0;
  for (unsigned int lane = 0; lane < kLanes; ++lane) total += lanes[lane][threadIdx.x];
  if (out != nullptr) {
    out[col] = static_cast<float>(total);
  } else {
    partial[blockIdx.y * cols + col] = total;
  }
}

template <typename T>
void column_sums(const T* x, int64_t rows, int64_t cols, float* out, Device device) {
  const int64_t chunk_rows = rows_per_chunk(rows);
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  const dim3 grid(static_cast<unsigned int>((cols + kTileColumns - 1) / kTileColumns),
                  static_cast<unsigned int>(std::max<int64_t>(chunks, 1)));
  const dim3 block(kTileColumns, kLanes);
  if (chunks <= 1) {
    column_partials<T><<<grid, block, 0, stream(device)>>>(x, rows, cols, chunk_rows, nullptr, out);
    return;
  }
  Tensor partial =
      Tensor::empty(Shape{8 * chunks * cols}, DType::u8, device, MemoryCategory::workspace);
  auto* partial_d = static_cast<double*>(partial.device_data());
  column_partials<T>
      <<<grid, block, 0, stream(device)>>>(x, rows, cols, chunk_rows, partial_d, nullptr);
  sum_column_partials<float>
      <<<blocks_for(cols, kThreads), kThreads, 0, stream(device)>>>(partial_d, chunks, cols, out);
}

// Sums x (squared or not) times factor; writes out (f32, on the device)
// and/or returns the double on the host (synchronising) when asked.
double reduce(const Tensor& x, bool squares, double factor, float* out, bool to_host,
              const char* op) {
  const Device device = x.device();
  DeviceGuard guard(device);
  const int64_t n = x.numel();
  const unsigned int blocks =
      n == 0 ? 1 : std::min<unsigned int>(kPartials, blocks_for(n, kThreads));
  // The partial sums and the result, as doubles: 8 bytes each.
  Tensor partial =
      Tensor::empty(Shape{8 * (blocks + 1)}, DType::u8, device, MemoryCategory::workspace);
  auto* partial_d = static_cast<double*>(partial.device_data());
  if (n == 0) {
    check(cudaMemsetAsync(partial_d, 0, sizeof(double), stream(device)), "cudaMemsetAsync");
  } else {
    dispatch_float(x.dtype(), op, [&](auto* tag) {
      using T = Element<decltype(tag)>;
      partial_sums<T><<<blocks, kThreads, 0, stream(device)>>>(
          static_cast<const T*>(x.device_data()), n, squares, partial_d);
    });
    check_launch(op);
  }
  double* result_d = partial_d + blocks;
  final_sum<<<1, kThreads, 0, stream(device)>>>(partial_d, n == 0 ? 1 : blocks, factor, out,
                                                to_host ? result_d : nullptr);
  check_launch(op);
  if (!to_host) return 0.0;
  double result = 0.0;
  check(cudaMemcpyAsync(&result, result_d, sizeof(double), cudaMemcpyDeviceToHost, stream(device)),
        "cudaMemcpyAsync");
  sync_stream(device);
  return result;
}

}  // namespace

Tensor sum(const Tensor& x) {
  Tensor out = Tensor::empty(Shape{}, DType::f32, x.device());
  reduce(x, false, 1.0, static_cast<float*>(out.device_data()), false, "sum");
  return out;
}

Tensor mean(const Tensor& x) {
  Tensor out = Tensor::empty(Shape{}, DType::f32, x.device());
  const double factor = x.numel() == 0 ? std::numeric_limits<double>::quiet_NaN()
                                       : 1.0 / static_cast<double>(x.numel());
  reduce(x, false, factor, static_cast<float*>(out.device_data()), false, "mean");
  return out;
}

double squared_norm(const Tensor& x) {
  if (x.numel() == 0) return 0.0;
  return reduce(x, true, 1.0, nullptr, true, "squared_norm");
}

// target: x's trailing dimensions, more than one element (kernels::sum_to_shape).
Tensor sum_to_shape(const Tensor& x, const Shape& target) {
  Tensor out = Tensor::empty(target, DType::f32, x.device());
  const int64_t cols = target.numel();
  if (cols == 0) return out;
  const int64_t rows = x.numel() / cols;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "sum_to_shape", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    column_sums<T>(static_cast<const T*>(x.device_data()), rows, cols,
                   static_cast<float*>(out.device_data()), x.device());
  });
  check_launch("sum_to_shape");
  return out;
}

}  // namespace tandem::cuda
