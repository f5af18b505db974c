// The row-wise parts of attention on the device (kernels/detail/
// attention_rows.h): one block per row of scores, the same arithmetic as the
// CPU (f32 exponentials, the row's sum in double, the dropout mask from the
// same generator).
#include <cmath>

#include "tandem/base/error.h"
#include "tandem/cuda/checks.h"
#include "tandem/cuda/elements.cuh"
#include "tandem/cuda/kernels.h"
#include "tandem/cuda/random.cuh"
#include "tandem/cuda/runtime.h"

namespace tandem::cuda {
namespace {

using kernels::detail::AttentionRows;

constexpr unsigned int kThreads = 256;

// The kernels' copy of AttentionRows (plain values for a kernel argument).
struct Rows {
  int64_t T, S, first;
  float scale, keep_scale;
  bool causal, dropout;
  uint64_t seed, offset, threshold;
};

Rows rows_of(const AttentionRows& r, int64_t first) {
  return {r.T,      r.S,       first,  r.scale,  r.keep_scale,
          r.causal, r.dropout, r.seed, r.offset, r.threshold};
}

__device__ __forceinline__ int64_t visible(const Rows& r, int64_t i) {
  return r.causal ? (i + 1 < r.S ? i + 1 : r.S) : r.S;
}

__device__ __forceinline__ float dropout_factor(const Rows& r, int64_t h, int64_t i, int64_t j) {
  const uint64_t index = r.offset + static_cast<uint64_t>((h * r.T + i) * r.S + j);
  return random_bits_at(r.seed, index) >= r.threshold ? r.keep_scale : 0.0f;
}

__global__ void probabilities_kernel(float* scores, float* lse, Rows r) {
  __shared__ float max_scratch[kThreads];
  __shared__ double sum_scratch[kThreads];
  const int64_t row = blockIdx.x;
  const int64_t h = r.first + row / r.T, i = row % r.T;
  const int64_t limit = visible(r, i);
  float* x = scores + row * r.S;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < limit; j += blockDim.x) m = fmaxf(m, x[j] * r.scale);
  m = block_max(m, max_scratch);
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < limit; j += blockDim.x) {
    const float e = expf(x[j] * r.scale - m);
    x[j] = e;
    s += e;
  }
  const double sum = block_sum(s, sum_scratch);
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = threadIdx.x; j < r.S; j += blockDim.x) {
    float p = j < limit ? x[j] * inv : 0.0f;
    if (r.dropout && j < limit) p *= dropout_factor(r, h, i, j);
    x[j] = p;
  }
  if (threadIdx.x == 0) lse[h * r.T + i] = m + static_cast<float>(log(sum));
}

template <typename T>
__global__ void row_dot_kernel(const T* a, const T* b, float* out, int64_t rows, int64_t D) {
  TANDEM_CUDA_FOR(row, rows) {
    double acc = 0.0;
    for (int64_t c = 0; c < D; ++c) {
      acc += static_cast<double>(load(a, row * D + c)) * load(b, row * D + c);
    }
    out[row] = static_cast<float>(acc);
  }
}

__global__ void score_grads_kernel(float* probs, float* dprobs, float* dropped, const float* lse,
                                   const float* row_dot, Rows r) {
  const int64_t row = blockIdx.x;
  const int64_t h = r.first + row / r.T, i = row % r.T;
  const int64_t limit = visible(r, i);
  const float l = lse[h * r.T + i], di = row_dot[h * r.T + i];
  float* pr = probs + row * r.S;
  float* dpr = dprobs + row * r.S;
  float* pdr = dropped + row * r.S;
  for (int64_t j = threadIdx.x; j < r.S; j += blockDim.x) {
    if (j < limit) {
      const float prob = expf(pr[j] * r.scale - l);
      const float f = r.dropout ? dropout_factor(r, h, i, j) : 1.0f;
      dpr[j] = prob * (dpr[j] * f - di) * r.scale;
      pdr[j] = prob * f;
    } else {
      dpr[j] = 0.0f;
      pdr[j] = 0.0f;
    }
  }
}

unsigned int row_blocks(const Tensor& scores, const char* op) {
  const int64_t rows = scores.numel() / std::max<int64_t>(scores.dim(-1), 1);
  if (rows > 0x7fffffff) TANDEM_THROW(ShapeError, op, ": ", rows, " rows exceed a CUDA grid");
  return static_cast<unsigned int>(rows);
}

}  // namespace

void attention_probabilities(const AttentionRows& rows, int64_t first, Tensor& scores,
                             Tensor& lse) {
  check_same_device("attention", scores, {&lse});
  const unsigned int blocks = row_blocks(scores, "attention");
  if (blocks == 0 || rows.S == 0) return;
  DeviceGuard guard(scores.device());
  probabilities_kernel<<<blocks, kThreads, 0, stream(scores.device())>>>(
      static_cast<float*>(scores.device_data()), static_cast<float*>(lse.device_data()),
      rows_of(rows, first));
  check_launch("attention");
}

Tensor attention_row_dot(const Tensor& dout, const Tensor& out) {
  check_same_device("attention_backward", dout, {&out});
  const int64_t D = dout.dim(-1), rows = dout.numel() / std::max<int64_t>(D, 1);
  Tensor row_dot = Tensor::empty(Shape{rows}, DType::f32, dout.device());
  if (rows == 0) return row_dot;
  DeviceGuard guard(dout.device());
  dispatch_float(dout.dtype(), "attention_backward", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    row_dot_kernel<T><<<blocks_for(rows, kThreads), kThreads, 0, stream(dout.device())>>>(
        static_cast<const T*>(dout.device_data()), static_cast<const T*>(out.device_data()),
        static_cast<float*>(row_dot.device_data()), rows, D);
  });
  check_launch("attention_backward");
  return row_dot;
}

void attention_score_grads(const AttentionRows& rows, int64_t first, Tensor& probs, Tensor& dprobs,
                           Tensor& dropped, const Tensor& lse, const Tensor& row_dot) {
  check_same_device("attention_backward", probs, {&dprobs, &dropped, &lse, &row_dot});
  const unsigned int blocks = row_blocks(probs, "attention_backward");
  if (blocks == 0) return;
  DeviceGuard guard(probs.device());
  score_grads_kernel<<<blocks, kThreads, 0, stream(probs.device())>>>(
      static_cast<float*>(probs.device_data()), static_cast<float*>(dprobs.device_data()),
      static_cast<float*>(dropped.device_data()), static_cast<const float*>(lse.device_data()),
      static_cast<const float*>(row_dot.device_data()), rows_of(rows, first));
  check_launch("attention_backward");
}

}  // namespace tandem::cuda
