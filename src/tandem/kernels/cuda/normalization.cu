// Layer norm and RMSNorm on the device: one block per row for the
// statistics and dx (sums in double, as on the CPU); the parameters'
// gradients summed per column over blocks of rows, then the blocks in order,
// so the result does not depend on scheduling.
#include <cmath>

#include "tandem/base/error.h"
#include "tandem/kernels/cuda/column_partials.cuh"
#include "tandem/kernels/cuda/kernels.h"
#include "tandem/tensor/cuda/elements.cuh"
#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

constexpr unsigned int kThreads = 256;
// Rows per partial sum of a column: 64 gives a 8192 x 768 layer norm 384
// blocks (256 gave 96, under one per multiprocessor of an H200).
constexpr int64_t kRowBlock = 64;

struct RowsCols {
  int64_t rows, cols;
};

// x's rows (one block each) and columns. The operands were checked by the
// public kernels (kernels/normalization.cc); the grid's limit is this file's.
RowsCols rows_cols(const Tensor& x, const char* op) {
  const int64_t cols = x.dim(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  if (rows > 0x7fffffff) TANDEM_THROW(ShapeError, op, ": ", rows, " rows exceed a CUDA grid");
  return {rows, cols};
}

template <typename T>
__global__ void layer_norm_kernel(const T* x, const float* gamma, const float* beta, T* y,
                                  float* mean, float* rstd, int64_t C, float eps) {
  __shared__ double scratch[kThreads];
  const int64_t r = blockIdx.x;
  const T* row = x + r * C;
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += load(row, c);
  const double m = block_sum(s, scratch) / static_cast<double>(C);
  double sq = 0.0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const double d = load(row, c) - m;
    sq += d * d;
  }
  const double var = block_sum(sq, scratch) / static_cast<double>(C);
  const float scale = static_cast<float>(1.0 / sqrt(var + eps));
  const float mf = static_cast<float>(m);
  if (threadIdx.x == 0) {
    mean[r] = mf;
    rstd[r] = scale;
  }
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    store(y, r * C + c, (load(row, c) - mf) * scale * gamma[c] + beta[c]);
  }
}

template <typename T>
__global__ void rms_norm_kernel(const T* x, const float* gamma, T* y, float* rstd, int64_t C,
                                float eps) {
  __shared__ double scratch[kThreads];
  const int64_t r = blockIdx.x;
  const T* row = x + r * C;
  double sq = 0.0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const double v = load(row, c);
    sq += v * v;
  }
  const double mean_square = block_sum(sq, scratch) / static_cast<double>(C);
  const float scale = static_cast<float>(1.0 / sqrt(mean_square + eps));
  if (threadIdx.x == 0) rstd[r] = scale;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    store(y, r * C + c, load(row, c) * scale * gamma[c]);
  }
}

// mean == nullptr: RMSNorm (x-hat = x * rstd).
template <typename T>
__global__ void norm_dx_kernel(const T* dy, const T* x, const float* mean, const float* rstd,
                               const float* gamma, T* dx, int64_t C) {
  __shared__ double scratch[kThreads];
  const int64_t r = blockIdx.x;
  const float mu = mean ? mean[r] : 0.0f, rs = rstd[r];
  double g = 0.0, gx = 0.0;  // sums of dxhat and dxhat * xhat
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const double xhat = static_cast<double>(load(x, r * C + c) - mu) * rs;
    const double dxhat = static_cast<double>(load(dy, r * C + c)) * gamma[c];
    g += dxhat;
    gx += dxhat * xhat;
  }
  const double mean_g = mean ? block_sum(g, scratch) / static_cast<double>(C) : 0.0;
  const double mean_gx = block_sum(gx, scratch) / static_cast<double>(C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const double xhat = static_cast<double>(load(x, r * C + c) - mu) * rs;
    const double dxhat = static_cast<double>(load(dy, r * C + c)) * gamma[c];
    store(dx, r * C + c, static_cast<float>(rs * (dxhat - mean_g - xhat * mean_gx)));
  }
}

// partial[b][c] = sum over rows of block b of dy * xhat, and (layer norm)
// partial[b][C + c] = sum of dy; grid (row blocks, column blocks).
template <typename T>
__global__ void param_partials_kernel(const T* dy, const T* x, const float* mean, const float* rstd,
                                      int64_t R, int64_t C, int64_t width, double* partial) {
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t b = blockIdx.x;
  const int64_t end = (b + 1) * kRowBlock < R ? (b + 1) * kRowBlock : R;
  double dgamma = 0.0, dbeta = 0.0;
  for (int64_t r = b * kRowBlock; r < end; ++r) {
    const double gy = load(dy, r * C + c);
    const float mu = mean ? mean[r] : 0.0f;
    dgamma += gy * (static_cast<double>(load(x, r * C + c) - mu) * rstd[r]);
    dbeta += gy;
  }
  partial[b * width + c] = dgamma;
  if (width > C) partial[b * width + C + c] = dbeta;
}

// dgamma (and dbeta when `with_beta`) into grads.
void param_grads(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                 int64_t R, int64_t C, bool with_beta, kernels::NormGrads& grads) {
  const int64_t width = with_beta ? 2 * C : C;
  Tensor sums = Tensor::empty(Shape{width}, DType::f32, x.device());
  if (R == 0) {
    sums.zero();
  } else {
    const int64_t blocks = (R + kRowBlock - 1) / kRowBlock;
    // Doubles, held as twice as many f32 elements (tensors have no f64).
    Tensor partial = Tensor::empty(Shape{2 * blocks * width}, DType::f32, x.device());
    cudaStream_t st = stream(x.device());
    const dim3 grid(static_cast<unsigned int>(blocks),
                    static_cast<unsigned int>((C + kThreads - 1) / kThreads));
    dispatch_float(x.dtype(), "norm_backward", [&](auto* tag) {
      using T = Element<decltype(tag)>;
      param_partials_kernel<T><<<grid, kThreads, 0, st>>>(
          static_cast<const T*>(dy.device_data()), static_cast<const T*>(x.device_data()),
          mean.defined() ? static_cast<const float*>(mean.device_data()) : nullptr,
          static_cast<const float*>(rstd.device_data()), R, C, width,
          static_cast<double*>(partial.device_data()));
    });
    sum_column_partials<float><<<blocks_for(width, kThreads), kThreads, 0, st>>>(
        static_cast<const double*>(partial.device_data()), blocks, width,
        static_cast<float*>(sums.device_data()));
    check_launch("norm_backward");
  }
  grads.dgamma = sums.slice(0, C).clone();
  if (with_beta) grads.dbeta = sums.slice(C, 2 * C).clone();
}

kernels::NormGrads norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& gamma, const char* op) {
  const RowsCols shape = rows_cols(x, op);
  const int64_t R = shape.rows, C = shape.cols;
  kernels::NormGrads grads;
  grads.dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  DeviceGuard guard(x.device());
  if (R > 0) {
    dispatch_float(x.dtype(), op, [&](auto* tag) {
      using T = Element<decltype(tag)>;
      norm_dx_kernel<T><<<static_cast<unsigned int>(R), kThreads, 0, stream(x.device())>>>(
          static_cast<const T*>(dy.device_data()), static_cast<const T*>(x.device_data()),
          mean.defined() ? static_cast<const float*>(mean.device_data()) : nullptr,
          static_cast<const float*>(rstd.device_data()),
          static_cast<const float*>(gamma.device_data()), static_cast<T*>(grads.dx.device_data()),
          C);
    });
    check_launch(op);
  }
  param_grads(dy, x, mean, rstd, R, C, mean.defined(), grads);
  return grads;
}

}  // namespace

kernels::NormResult layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               float eps) {
  const RowsCols shape = rows_cols(x, "layer_norm");
  const int64_t R = shape.rows, C = shape.cols;
  kernels::NormResult result;
  result.y = Tensor::empty(x.shape(), x.dtype(), x.device());
  result.mean = Tensor::empty(Shape{R}, DType::f32, x.device());
  result.rstd = Tensor::empty(Shape{R}, DType::f32, x.device());
  if (R == 0) return result;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "layer_norm", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    layer_norm_kernel<T><<<static_cast<unsigned int>(R), kThreads, 0, stream(x.device())>>>(
        static_cast<const T*>(x.device_data()), static_cast<const float*>(gamma.device_data()),
        static_cast<const float*>(beta.device_data()), static_cast<T*>(result.y.device_data()),
        static_cast<float*>(result.mean.device_data()),
        static_cast<float*>(result.rstd.device_data()), C, eps);
  });
  check_launch("layer_norm");
  return result;
}

kernels::NormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                       const Tensor& rstd, const Tensor& gamma) {
  return norm_backward(dy, x, mean, rstd, gamma, "layer_norm_backward");
}

kernels::NormResult rms_norm(const Tensor& x, const Tensor& gamma, float eps) {
  const RowsCols shape = rows_cols(x, "rms_norm");
  const int64_t R = shape.rows, C = shape.cols;
  kernels::NormResult result;
  result.y = Tensor::empty(x.shape(), x.dtype(), x.device());
  result.rstd = Tensor::empty(Shape{R}, DType::f32, x.device());
  if (R == 0) return result;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "rms_norm", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    rms_norm_kernel<T><<<static_cast<unsigned int>(R), kThreads, 0, stream(x.device())>>>(
        static_cast<const T*>(x.device_data()), static_cast<const float*>(gamma.device_data()),
        static_cast<T*>(result.y.device_data()), static_cast<float*>(result.rstd.device_data()), C,
        eps);
  });
  check_launch("rms_norm");
  return result;
}

kernels::NormGrads rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& rstd,
                                     const Tensor& gamma) {
  return norm_backward(dy, x, Tensor(), rstd, gamma, "rms_norm_backward");
}

}  // namespace tandem::cuda
