// Per-example softmax cross-entropy (classifiers and language models) on the
// device, with ignore_index and label smoothing: the CPU kernel's formulas
// (kernels/per_example_loss.cc, detail::token_cross_entropy), one block per
// label position, double sums. Labels are checked on the host with the CPU
// kernel's own checks (one read back of the labels per forward pass).
#include <cmath>

#include "tandem/kernels/cuda/kernels.h"
#include "tandem/kernels/detail/loss_common.h"
#include "tandem/tensor/cuda/elements.cuh"
#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

constexpr unsigned int kThreads = 256;
constexpr int32_t kNoIgnore = INT32_MIN;  // a label no position can have

// token[r] and lse[r] of position r: block r.
template <typename T>
__global__ void token_kernel(const T* x, const int32_t* labels, int64_t k, int32_t ignore,
                             double keep, double spread, double* token, float* lse) {
  __shared__ float fscratch[kThreads];
  __shared__ double dscratch[kThreads];
  const int64_t r = blockIdx.x;
  const int32_t label = labels[r];
  if (label == ignore) {
    if (threadIdx.x == 0) {
      token[r] = 0.0;
      lse[r] = 0.0f;
    }
    return;
  }
  const T* row = x + r * k;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) m = fmaxf(m, load(row, j));
  const float max = block_max(m, fscratch);
  double total = 0.0, shifted_sum = 0.0;
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
    const float shifted = load(row, j) - max;
    total += expf(shifted);
    shifted_sum += shifted;
  }
  total = block_sum(total, dscratch);
  shifted_sum = block_sum(shifted_sum, dscratch);
  if (threadIdx.x == 0) {
    const double log_total = log(total);
    double loss = keep * (log_total - (load(row, label) - max));
    if (spread != 0.0) loss += spread * (static_cast<double>(k) * log_total - shifted_sum);
    token[r] = loss;
    lse[r] = static_cast<float>(max + log_total);
  }
}

// loss[n]: the mean over example n's positions that are not ignored; and
// scale[n] = grad[n] / count (for the backward pass, when grad is given).
__global__ void per_example_kernel(const double* token, const int32_t* labels, int64_t n,
                                   int64_t positions, int32_t ignore, float* loss,
                                   const float* grad, float* scale) {
  TANDEM_CUDA_FOR(e, n) {
    double total = 0.0;
    int64_t count = 0;
    for (int64_t p = 0; p < positions; ++p) {
      const int64_t r = e * positions + p;
      if (labels[r] == ignore) continue;
      ++count;
      if (token != nullptr) total += token[r];
    }
    if (loss != nullptr) loss[e] = count > 0 ? static_cast<float>(total / count) : 0.0f;
    if (scale != nullptr) {
      scale[e] = count > 0 ? static_cast<float>(static_cast<double>(grad[e]) / count) : 0.0f;
    }
  }
}

template <typename T>
__global__ void backward_kernel(const T* x, const int32_t* labels, const float* lse,
                                const float* scale, int64_t total, int64_t k, int64_t positions,
                                int32_t ignore, float keep, float spread, T* dx) {
  TANDEM_CUDA_FOR(i, total) {
    const int64_t r = i / k, j = i % k;
    const int32_t label = labels[r];
    const float s = label == ignore ? 0.0f : scale[r / positions];
    if (s == 0.0f) {
      store(dx, i, 0.0f);
    } else {
      const float target = spread + (j == label ? keep : 0.0f);
      store(dx, i, s * (expf(load(x, i) - lse[r]) - target));
    }
  }
}

int32_t ignore_of(const kernels::CrossEntropyOptions& options) {
  return options.ignore_index ? *options.ignore_index : kNoIgnore;
}

}  // namespace

kernels::CrossEntropyPerExample softmax_cross_entropy_per_example(
    const Tensor& logits, const Tensor& labels, const kernels::CrossEntropyOptions& options) {
  // Operands and label values checked by kernels::softmax_cross_entropy_per_example.
  const char* op = "softmax_cross_entropy_per_example";
  const int64_t N = logits.dim(0), P = labels.shape().row_numel(), K = logits.dim(-1);
  const Device device = logits.device();
  kernels::CrossEntropyPerExample result;
  result.log_sum_exp = Tensor::empty(labels.shape(), DType::f32, device);
  result.loss = Tensor::empty(Shape{N}, DType::f32, device);
  if (N == 0) return result;
  Tensor token = Tensor::empty(Shape{N * P * 8}, DType::u8, device, MemoryCategory::workspace);
  const auto keep = 1.0 - options.label_smoothing;
  const auto spread = options.label_smoothing / static_cast<double>(K);
  DeviceGuard guard(device);
  if (P > 0) {
    dispatch_float(logits.dtype(), op, [&](auto* tag) {
      using T = Element<decltype(tag)>;
      token_kernel<T><<<static_cast<unsigned int>(N * P), kThreads, 0, stream(device)>>>(
          static_cast<const T*>(logits.device_data()),
          static_cast<const int32_t*>(labels.device_data()), K, ignore_of(options), keep, spread,
          static_cast<double*>(token.device_data()),
          static_cast<float*>(result.log_sum_exp.device_data()));
    });
    check_launch(op);
  }
  per_example_kernel<<<blocks_for(N, kThreads), kThreads, 0, stream(device)>>>(
      static_cast<const double*>(token.device_data()),
      static_cast<const int32_t*>(labels.device_data()), N, P, ignore_of(options),
      static_cast<float*>(result.loss.device_data()), nullptr, nullptr);
  check_launch(op);
  return result;
}

Tensor softmax_cross_entropy_per_example_backward(const Tensor& grad_loss, const Tensor& logits,
                                                  const Tensor& labels, const Tensor& log_sum_exp,
                                                  const kernels::CrossEntropyOptions& options) {
  // Operands checked by kernels::softmax_cross_entropy_per_example_backward.
  const char* op = "softmax_cross_entropy_per_example_backward";
  const int64_t N = logits.dim(0), K = logits.dim(-1), P = labels.shape().row_numel();
  const Device device = logits.device();
  Tensor grad = Tensor::empty(logits.shape(), logits.dtype(), device);
  const int64_t total = logits.numel();
  if (total == 0) return grad;
  const Tensor g = grad_loss.to(DType::f32);
  Tensor scale = Tensor::empty(Shape{N}, DType::f32, device, MemoryCategory::workspace);
  DeviceGuard guard(device);
  per_example_kernel<<<blocks_for(N, kThreads), kThreads, 0, stream(device)>>>(
      nullptr, static_cast<const int32_t*>(labels.device_data()), N, P, ignore_of(options), nullptr,
      static_cast<const float*>(g.device_data()), static_cast<float*>(scale.device_data()));
  check_launch(op);
  const auto keep = static_cast<float>(1.0 - options.label_smoothing);
  const auto spread = static_cast<float>(options.label_smoothing / static_cast<double>(K));
  dispatch_float(logits.dtype(), op, [&](auto* tag) {
    using T = Element<decltype(tag)>;
    backward_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream(device)>>>(
        static_cast<const T*>(logits.device_data()),
        static_cast<const int32_t*>(labels.device_data()),
        static_cast<const float*>(log_sum_exp.device_data()),
        static_cast<const float*>(scale.device_data()), total, K, P, ignore_of(options), keep,
        spread, static_cast<T*>(grad.device_data()));
  });
  check_launch(op);
  return grad;
}

}  // namespace tandem::cuda
