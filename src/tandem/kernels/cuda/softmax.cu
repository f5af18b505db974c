// Row-wise softmax, log-softmax and the fused softmax cross-entropy: one
// block per row of the last dimension, f32 arithmetic, the row maximum
// subtracted before exp (as on the CPU).
#include <cmath>
#include <vector>

#include "tandem/kernels/cuda/kernels.h"
#include "tandem/tensor/cuda/elements.cuh"
#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

constexpr unsigned int kThreads = 256;

template <typename T>
__device__ void row_max_and_sum(const T* row, int64_t k, float* scratch, float& max, float& sum) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) m = fmaxf(m, load(row, j));
  max = block_max(m, scratch);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) s += expf(load(row, j) - max);
  sum = block_sum(s, scratch);
}

template <typename T>
__global__ void softmax_kernel(const T* x, T* y, int64_t k, bool log) {
  __shared__ float scratch[kThreads];
  const T* row = x + blockIdx.x * k;
  T* out = y + blockIdx.x * k;
  float max = 0.0f, sum = 0.0f;
  row_max_and_sum(row, k, scratch, max, sum);
  const float log_sum = logf(sum);
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
    const float v = load(row, j) - max;
    store(out, j, log ? v - log_sum : expf(v) / sum);
  }
}

// softmax: dx = y (dy - sum(dy y)); log-softmax: dx = dy - exp(y) sum(dy).
template <typename T>
__global__ void softmax_backward_kernel(const T* dy, const T* y, T* dx, int64_t k, bool log) {
  __shared__ float scratch[kThreads];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * k;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
    s += log ? load(dy, base + j) : load(dy, base + j) * load(y, base + j);
  }
  const float total = block_sum(s, scratch);
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
    const float g = load(dy, base + j), v = load(y, base + j);
    store(dx, base + j, log ? g - expf(v) * total : v * (g - total));
  }
}

// Probabilities (f32) and each row's -log p[label] (double).
template <typename T>
__global__ void cross_entropy_kernel(const T* logits, const int32_t* labels, int64_t k,
                                     float* probs, double* row_loss) {
  __shared__ float scratch[kThreads];
  const int64_t r = blockIdx.x;
  const T* row = logits + r * k;
  float max = 0.0f, sum = 0.0f;
  row_max_and_sum(row, k, scratch, max, sum);
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
    probs[r * k + j] = expf(load(row, j) - max) / sum;
  }
  if (threadIdx.x == 0) {
    row_loss[r] = static_cast<double>(logf(sum)) - (load(row, labels[r]) - max);
  }
}

__global__ void loss_total(const double* row_loss, int64_t rows, double factor, float* out) {
  __shared__ double scratch[kThreads];
  double acc = 0.0;
  // Strided by thread, then a fixed tree: the order depends on rows alone.
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) acc += row_loss[i];
  const double total = block_sum(acc, scratch);
  if (threadIdx.x == 0) *out = static_cast<float>(total * factor);
}

template <typename T>
__global__ void cross_entropy_backward_kernel(const float* probs, const int32_t* labels, int64_t n,
                                              int64_t k, float factor, T* grad) {
  TANDEM_CUDA_FOR(i, n) {
    const int64_t r = i / k, j = i % k;
    store(grad, i, factor * (probs[i] - (j == labels[r] ? 1.0f : 0.0f)));
  }
}

template <typename T>
__global__ void correct_kernel(const T* logits, const int32_t* labels, int64_t rows, int64_t k,
                               unsigned long long* correct) {
  TANDEM_CUDA_FOR(r, rows) {
    int64_t best = 0;
    for (int64_t j = 1; j < k; ++j) {
      if (load(logits, r * k + j) > load(logits, r * k + best)) best = j;
    }
    if (best == labels[r]) atomicAdd(correct, 1ull);
  }
}

// x checked by kernels::softmax (rows of the last dimension).
Tensor rowwise(const Tensor& x, bool log, const char* op) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t k = x.dim(x.rank() - 1);
  if (x.numel() == 0) return y;
  const int64_t rows = x.numel() / k;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), op, [&](auto* tag) {
    using T = Element<decltype(tag)>;
    softmax_kernel<T><<<static_cast<unsigned int>(rows), kThreads, 0, stream(x.device())>>>(
        static_cast<const T*>(x.device_data()), static_cast<T*>(y.device_data()), k, log);
  });
  check_launch(op);
  return y;
}

// dy and y checked by kernels::softmax_backward (matching rows).
Tensor rowwise_backward(const Tensor& dy, const Tensor& y, bool log, const char* op) {
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  const int64_t k = dy.dim(dy.rank() - 1);
  if (dy.numel() == 0) return dx;
  DeviceGuard guard(dy.device());
  dispatch_float(dy.dtype(), op, [&](auto* tag) {
    using T = Element<decltype(tag)>;
    softmax_backward_kernel<T>
        <<<static_cast<unsigned int>(dy.numel() / k), kThreads, 0, stream(dy.device())>>>(
            static_cast<const T*>(dy.device_data()), static_cast<const T*>(y.device_data()),
            static_cast<T*>(dx.device_data()), k, log);
  });
  check_launch(op);
  return dx;
}

double normalizer_for(double normalizer, int64_t rows) {
  return normalizer > 0.0 ? normalizer : static_cast<double>(rows);
}

}  // namespace

Tensor softmax(const Tensor& x) {
  return rowwise(x, false, "softmax");
}

Tensor log_softmax(const Tensor& x) {
  return rowwise(x, true, "log_softmax");
}

Tensor softmax_backward(const Tensor& dy, const Tensor& y) {
  return rowwise_backward(dy, y, false, "softmax_backward");
}

Tensor log_softmax_backward(const Tensor& dy, const Tensor& y) {
  return rowwise_backward(dy, y, true, "log_softmax_backward");
}

kernels::CrossEntropyResult softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                                  double normalizer) {
  const int64_t rows = logits.dim(0), k = logits.dim(1);
  const Device device = logits.device();
  kernels::CrossEntropyResult result;
  result.probabilities = Tensor::empty(logits.shape(), DType::f32, device);
  result.loss = Tensor::empty(Shape{}, DType::f32, device);
  Tensor row_loss = Tensor::empty(Shape{rows * 8}, DType::u8, device, MemoryCategory::workspace);
  DeviceGuard guard(device);
  if (rows > 0 && k > 0) {
    dispatch_float(logits.dtype(), "softmax_cross_entropy", [&](auto* tag) {
      using T = Element<decltype(tag)>;
      cross_entropy_kernel<T><<<static_cast<unsigned int>(rows), kThreads, 0, stream(device)>>>(
          static_cast<const T*>(logits.device_data()),
          static_cast<const int32_t*>(labels.device_data()), k,
          static_cast<float*>(result.probabilities.device_data()),
          static_cast<double*>(row_loss.device_data()));
    });
    check_launch("softmax_cross_entropy");
  }
  loss_total<<<1, kThreads, 0, stream(device)>>>(static_cast<const double*>(row_loss.device_data()),
                                                 rows, 1.0 / normalizer_for(normalizer, rows),
                                                 static_cast<float*>(result.loss.device_data()));
  check_launch("softmax_cross_entropy total");
  return result;
}

Tensor softmax_cross_entropy_backward(const Tensor& probabilities, const Tensor& labels,
                                      float grad_loss, double normalizer, DType out_dtype) {
  const int64_t rows = probabilities.dim(0), k = probabilities.dim(1);
  Tensor grad = Tensor::empty(probabilities.shape(), out_dtype, probabilities.device());
  const int64_t n = rows * k;
  if (n == 0) return grad;
  const auto factor = static_cast<float>(grad_loss / normalizer_for(normalizer, rows));
  DeviceGuard guard(probabilities.device());
  dispatch_float(out_dtype, "softmax_cross_entropy_backward", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    cross_entropy_backward_kernel<T>
        <<<blocks_for(n, kThreads), kThreads, 0, stream(probabilities.device())>>>(
            static_cast<const float*>(probabilities.device_data()),
            static_cast<const int32_t*>(labels.device_data()), n, k, factor,
            static_cast<T*>(grad.device_data()));
  });
  check_launch("softmax_cross_entropy_backward");
  return grad;
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  const int64_t rows = logits.dim(0), k = logits.dim(1);
  if (rows == 0 || k == 0) return 0;
  const Device device = logits.device();
  Tensor counter = Tensor::zeros(Shape{8}, DType::u8, device, MemoryCategory::workspace);
  auto* count_d = static_cast<unsigned long long*>(counter.device_data());
  DeviceGuard guard(device);
  dispatch_float(logits.dtype(), "count_correct", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    correct_kernel<T><<<blocks_for(rows, kThreads), kThreads, 0, stream(device)>>>(
        static_cast<const T*>(logits.device_data()),
        static_cast<const int32_t*>(labels.device_data()), rows, k, count_d);
  });
  check_launch("count_correct");
  unsigned long long correct = 0;
  check(cudaMemcpyAsync(&correct, count_d, sizeof(correct), cudaMemcpyDeviceToHost, stream(device)),
        "cudaMemcpyAsync");
  sync_stream(device);
  return static_cast<int64_t>(correct);
}

}  // namespace tandem::cuda
