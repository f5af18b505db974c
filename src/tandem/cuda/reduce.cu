// Reductions in double, in an order fixed by the element count alone (a
// fixed grid, then one block over the partial sums), so that a result never
// depends on scheduling: the same input gives the same bits every run.
#include <limits>

#include "tandem/cuda/elements.cuh"
#include "tandem/cuda/kernels.h"
#include "tandem/cuda/runtime.h"

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

// column j of x viewed as (rows, cols): out[j] = sum over rows, in double.
template <typename T>
__global__ void column_sums(const T* x, int64_t rows, int64_t cols, float* out) {
  TANDEM_CUDA_FOR(j, cols) {
    double acc = 0.0;
    for (int64_t r = 0; r < rows; ++r) acc += load(x, r * cols + j);
    out[j] = static_cast<float>(acc);
  }
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

Tensor sum_to_shape(const Tensor& x, const Shape& target) {
  const int r = x.rank(), t = target.rank();
  bool trailing = t <= r;
  for (int i = 0; trailing && i < t; ++i) trailing = target.dim(i) == x.dim(r - t + i);
  if (!trailing) {
    TANDEM_THROW(ShapeError, "sum_to_shape: ", target.to_string(), " is not a trailing part of ",
                 x.shape().to_string());
  }
  Tensor out = Tensor::empty(target, DType::f32, x.device());
  const int64_t cols = target.numel();
  if (cols == 0) return out;
  const int64_t rows = x.numel() / cols;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "sum_to_shape", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    column_sums<T><<<blocks_for(cols, kThreads), kThreads, 0, stream(x.device())>>>(
        static_cast<const T*>(x.device_data()), rows, cols, static_cast<float*>(out.device_data()));
  });
  check_launch("sum_to_shape");
  return out;
}

}  // namespace tandem::cuda
