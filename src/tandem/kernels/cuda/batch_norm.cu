// Batch norm on the device, split as on the CPU (moments, apply; backward
// sums, dx) so that synchronised batch norm can sum the per-channel parts
// over replicas in between. Per-channel sums run over blocks of rows: in a
// block, 8 lanes of threads per column take every 8th row, the lanes are
// added in order, and the blocks' partial sums (doubles) are added in order,
// so the result does not depend on scheduling. cuDNN's batch norm fuses
// statistics and normalisation into one call, which leaves no place for the
// cross-replica sum.

#include <cmath>

#include "tandem/base/error.h"
#include "tandem/kernels/cuda/kernels.h"
#include "tandem/tensor/cuda/elements.cuh"
#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

constexpr int64_t kRowBlock = 256;     // rows per partial sum
constexpr unsigned int kColumns = 32;  // columns per block of the column sums
constexpr unsigned int kLanes = 8;     // threads per column in a block
constexpr unsigned int kThreads = 256;

struct RowsCols {
  int64_t rows, cols;
};

// x's rows and channels (the last dimension). Every operand here was checked
// by the public kernels (kernels/normalization.cc).
RowsCols rows_cols(const Tensor& x) {
  const int64_t cols = x.dim(-1);
  return {cols == 0 ? 0 : x.numel() / cols, cols};
}

const float* f32(const Tensor& t) {
  return static_cast<const float*>(t.device_data());
}
float* f32(Tensor& t) {
  return static_cast<float*>(t.device_data());
}

// What a column sum adds for row r, column c: x; (x - mean)^2; or, in two
// halves of the output, dy and dy * (x - mean) * rstd.
enum class Term : int { value, squared_deviation, backward };

template <typename T, Term term>
__global__ void column_partials_kernel(const T* x, const T* dy, const float* mean,
                                       const float* rstd, int64_t R, int64_t C, int64_t width,
                                       double* partial) {
  __shared__ double first[kLanes][kColumns], second[kLanes][kColumns];
  const unsigned int col = threadIdx.x % kColumns, lane = threadIdx.x / kColumns;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kColumns + col;
  const int64_t b = blockIdx.x;
  const int64_t end = (b + 1) * kRowBlock < R ? (b + 1) * kRowBlock : R;
  double a = 0.0, s = 0.0;
  if (c < C) {
    for (int64_t r = b * kRowBlock + lane; r < end; r += kLanes) {
      const double v = load(x, r * C + c);
      if constexpr (term == Term::value) {
        a += v;
      } else if constexpr (term == Term::squared_deviation) {
        const double d = v - mean[c];
        a += d * d;
      } else {
        const double g = load(dy, r * C + c);
        a += g;
        s += g * ((v - mean[c]) * rstd[c]);
      }
    }
  }
  first[lane][col] = a;
  second[lane][col] = s;
  __syncthreads();
  if (lane == 0 && c < C) {
    double ta = 0.0, ts = 0.0;
    for (unsigned int l = 0; l < kLanes; ++l) {
      ta += first[l][col];
      ts += second[l][col];
    }
    partial[b * width + c] = ta;
    if (term == Term::backward) partial[b * width + C + c] = ts;
  }
}

// One block per column: each thread adds every kThreads-th partial in order,
// then a fixed tree adds the threads' sums, so the result does not depend on
// scheduling (and a column's thousands of partials are not one thread's
// serial loop).
__global__ void combine_partials_kernel(const double* partial, int64_t blocks, int64_t width,
                                        double scale, float* out) {
  __shared__ double sums[kThreads];
  const int64_t c = blockIdx.x;
  double acc = 0.0;
  for (int64_t b = threadIdx.x; b < blocks; b += kThreads) acc += partial[b * width + c];
  sums[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[c] = static_cast<float>(sums[0] * scale);
}

// Column sums of `term` over x's R rows into out (width f32), times scale.
template <Term term>
void column_sums(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& rstd,
                 int64_t R, int64_t C, double scale, Tensor& out, const char* op) {
  const int64_t width = out.numel();
  if (width == 0) return;  // no channels: nothing to sum (an empty grid is a launch error)
  DeviceGuard guard(x.device());
  const int64_t blocks = (R + kRowBlock - 1) / kRowBlock;
  if (blocks > 0x7fffffff || (C + kColumns - 1) / kColumns > 65535) {
    TANDEM_THROW(ShapeError, op, ": ", x.to_string(), " exceeds a CUDA grid");
  }
  // Doubles, held as twice as many f32 elements (tensors have no f64).
  Tensor partial =
      Tensor::empty(Shape{2 * blocks * width}, DType::f32, x.device(), MemoryCategory::workspace);
  cudaStream_t st = stream(x.device());
  const dim3 grid(static_cast<unsigned int>(blocks),
                  static_cast<unsigned int>((C + kColumns - 1) / kColumns));
  dispatch_float(x.dtype(), op, [&](auto* tag) {
    using T = Element<decltype(tag)>;
    column_partials_kernel<T, term><<<grid, kColumns * kLanes, 0, st>>>(
        static_cast<const T*>(x.device_data()),
        dy.defined() ? static_cast<const T*>(dy.device_data()) : nullptr,
        mean.defined() ? f32(mean) : nullptr, rstd.defined() ? f32(rstd) : nullptr, R, C, width,
        static_cast<double*>(partial.device_data()));
  });
  combine_partials_kernel<<<static_cast<unsigned int>(width), kThreads, 0, st>>>(
      static_cast<const double*>(partial.device_data()), blocks, width, scale, f32(out));
  check_launch(op);
}

__global__ void inverse_std_kernel(const float* variance, float* out, int64_t n, float eps) {
  TANDEM_CUDA_FOR(c, n) {
    out[c] = static_cast<float>(1.0 / sqrt(static_cast<double>(variance[c]) + eps));
  }
}

template <typename T>
__global__ void apply_kernel(const T* x, const float* mean, const float* rstd, const float* gamma,
                             const float* beta, T* y, int64_t n, int64_t C) {
  TANDEM_CUDA_FOR(i, n) {
    const int64_t c = i % C;
    const float a = rstd[c] * gamma[c];
    const float b = beta[c] - mean[c] * a;
    store(y, i, load(x, i) * a + b);
  }
}

__global__ void running_moments_kernel(float* running_mean, float* running_var, const float* mean,
                                       const float* variance, int64_t n, float momentum,
                                       double unbias) {
  TANDEM_CUDA_FOR(c, n) {
    running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * mean[c];
    running_var[c] =
        static_cast<float>((1.0 - momentum) * running_var[c] + momentum * variance[c] * unbias);
  }
}

template <typename T>
__global__ void backward_dx_kernel(const T* dy, const T* x, const float* mean, const float* rstd,
                                   const float* gamma, const float* sum_dy,
                                   const float* sum_dy_xhat, float inv_count, T* dx, int64_t n,
                                   int64_t C) {
  TANDEM_CUDA_FOR(i, n) {
    const int64_t c = i % C;
    const float xhat = (load(x, i) - mean[c]) * rstd[c];
    store(dx, i,
          gamma[c] * rstd[c] *
              (load(dy, i) - sum_dy[c] * inv_count - xhat * sum_dy_xhat[c] * inv_count));
  }
}

}  // namespace

kernels::Moments batch_norm_moments(const Tensor& x) {
  const RowsCols shape = rows_cols(x);
  const int64_t R = shape.rows, C = shape.cols;
  kernels::Moments m;
  m.count = R;
  m.mean = Tensor::empty(Shape{C}, DType::f32, x.device());
  m.variance = Tensor::empty(Shape{C}, DType::f32, x.device());
  const double inv_rows = 1.0 / static_cast<double>(R);
  column_sums<Term::value>(x, Tensor(), Tensor(), Tensor(), R, C, inv_rows, m.mean, "batch_norm");
  column_sums<Term::squared_deviation>(x, Tensor(), m.mean, Tensor(), R, C, inv_rows, m.variance,
                                       "batch_norm");
  return m;
}

Tensor inverse_std(const Tensor& variance, float eps) {
  Tensor out = Tensor::empty(variance.shape(), DType::f32, variance.device());
  const int64_t n = variance.numel();
  if (n == 0) return out;
  DeviceGuard guard(variance.device());
  inverse_std_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream(variance.device())>>>(
      f32(variance), f32(out), n, eps);
  check_launch("inverse_std");
  return out;
}

Tensor batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& rstd,
                        const Tensor& gamma, const Tensor& beta) {
  const RowsCols shape = rows_cols(x);
  const int64_t C = shape.cols;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t n = x.numel();
  if (n == 0) return y;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "batch_norm", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    apply_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream(x.device())>>>(
        static_cast<const T*>(x.device_data()), f32(mean), f32(rstd), f32(gamma), f32(beta),
        static_cast<T*>(y.device_data()), n, C);
  });
  check_launch("batch_norm");
  return y;
}

void update_running_moments(Tensor& running_mean, Tensor& running_var,
                            const kernels::Moments& batch, float momentum) {
  const int64_t C = batch.mean.numel();
  if (momentum == 0.0f || C == 0) return;
  const double unbias =
      batch.count > 1 ? static_cast<double>(batch.count) / (batch.count - 1) : 1.0;
  DeviceGuard guard(batch.mean.device());
  running_moments_kernel<<<blocks_for(C, kThreads), kThreads, 0, stream(batch.mean.device())>>>(
      f32(running_mean), f32(running_var), f32(batch.mean), f32(batch.variance), C, momentum,
      unbias);
  check_launch("batch_norm running moments");
}

kernels::BatchNormSums batch_norm_backward_sums(const Tensor& dy, const Tensor& x,
                                                const Tensor& mean, const Tensor& rstd) {
  const RowsCols shape = rows_cols(x);
  const int64_t R = shape.rows, C = shape.cols;
  Tensor both = Tensor::empty(Shape{2 * C}, DType::f32, x.device());
  if (R == 0) {
    both.zero();
  } else {
    column_sums<Term::backward>(x, dy, mean, rstd, R, C, 1.0, both, "batch_norm_backward");
  }
  return {both.slice(0, C).clone(), both.slice(C, 2 * C).clone()};
}

Tensor batch_norm_backward_dx(const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& rstd, const Tensor& gamma,
                              const kernels::BatchNormSums& sums, int64_t count) {
  const RowsCols shape = rows_cols(x);
  const int64_t C = shape.cols;
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t n = x.numel();
  if (n == 0) return dx;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "batch_norm_backward", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    backward_dx_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream(x.device())>>>(
        static_cast<const T*>(dy.device_data()), static_cast<const T*>(x.device_data()), f32(mean),
        f32(rstd), f32(gamma), f32(sums.sum_dy), f32(sums.sum_dy_xhat),
        1.0f / static_cast<float>(count), static_cast<T*>(dx.device_data()), n, C);
  });
  check_launch("batch_norm_backward");
  return dx;
}

}  // namespace tandem::cuda
