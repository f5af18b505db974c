// The row-wise parts of attention on the device (kernels/detail/
// attention_rows.h): a warp per row of scores for the softmax, a block per
// row for the score gradients; f32 exponentials, the row's sum in double,
// the dropout mask from the CPU's generator.
#include <cmath>

#include "tandem/base/error.h"
#include "tandem/kernels/cuda/kernels.h"
#include "tandem/kernels/cuda/random.cuh"
#include "tandem/tensor/cuda/elements.cuh"
#include "tandem/tensor/cuda/runtime.h"

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

// One warp per row, reduced with shuffles (a block per row spent its time
// in sixteen block-wide barriers). Three passes over the row (it stays in
// L1): the maximum, the sum of the exponentials in double, then the
// probabilities written in the output's dtype; the exponentials are
// recomputed rather than stored, so out may be a narrower type than scores
// or scores itself.
constexpr unsigned int kRowsPerBlock = kThreads / 32;

template <typename T>
__global__ void probabilities_kernel(const float* scores, T* out, float* lse, int64_t rows,
                                     Rows r) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const unsigned int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave together
  const int64_t h = r.first + row / r.T, i = row % r.T;
  const int64_t limit = visible(r, i);
  const float* x = scores + row * r.S;
  T* y = out + row * r.S;
  float m = -INFINITY;
  for (int64_t j = lane; j < limit; j += 32) m = fmaxf(m, x[j] * r.scale);
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(~0u, m, offset));
  double s = 0.0;
  for (int64_t j = lane; j < limit; j += 32) s += expf(x[j] * r.scale - m);
  for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(~0u, s, offset);
  const float inv = static_cast<float>(1.0 / s);
  for (int64_t j = lane; j < r.S; j += 32) {
    float p = j < limit ? expf(x[j] * r.scale - m) * inv : 0.0f;
    if (r.dropout && j < limit) p *= dropout_factor(r, h, i, j);
    store(y, j, p);
  }
  if (lane == 0) lse[h * r.T + i] = m + static_cast<float>(log(s));
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

// Each element is read before it is written by the same thread, so kept
// may be probs and dscores dprobs (f32, in place).
template <typename T>
__global__ void score_grads_kernel(const float* probs, const float* dprobs, const float* lse,
                                   const float* row_dot, T* kept, T* dscores, Rows r) {
  const int64_t row = blockIdx.x;
  const int64_t h = r.first + row / r.T, i = row % r.T;
  const int64_t limit = visible(r, i);
  const float l = lse[h * r.T + i], di = row_dot[h * r.T + i];
  const int64_t at = row * r.S;
  for (int64_t j = threadIdx.x; j < r.S; j += blockDim.x) {
    float ds = 0.0f, p = 0.0f;
    if (j < limit) {
      const float prob = expf(probs[at + j] * r.scale - l);
      const float f = r.dropout ? dropout_factor(r, h, i, j) : 1.0f;
      ds = prob * (dprobs[at + j] * f - di) * r.scale;
      p = prob * f;
    }
    store(dscores, at + j, ds);
    store(kept, at + j, p);
  }
}

unsigned int row_blocks(const Tensor& scores, const char* op) {
  const int64_t rows = scores.numel() / std::max<int64_t>(scores.dim(-1), 1);
  if (rows > 0x7fffffff) TANDEM_THROW(ShapeError, op, ": ", rows, " rows exceed a CUDA grid");
  return static_cast<unsigned int>(rows);
}

}  // namespace

void attention_probabilities(const AttentionRows& rows, int64_t first, Tensor& scores, Tensor& lse,
                             Tensor& probs) {
  const unsigned int blocks = row_blocks(scores, "attention");
  if (blocks == 0 || rows.S == 0) return;
  DeviceGuard guard(scores.device());
  const unsigned int warp_blocks = (blocks + kRowsPerBlock - 1) / kRowsPerBlock;
  dispatch_float(probs.dtype(), "attention", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    probabilities_kernel<T><<<warp_blocks, kThreads, 0, stream(scores.device())>>>(
        static_cast<const float*>(scores.device_data()), static_cast<T*>(probs.device_data()),
        static_cast<float*>(lse.device_data()), blocks, rows_of(rows, first));
  });
  check_launch("attention");
}

Tensor attention_row_dot(const Tensor& dout, const Tensor& out) {
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
                           const Tensor& lse, const Tensor& row_dot, Tensor& kept,
                           Tensor& dscores) {
  // This kernel writes kept and dscores as one element type.
  if (kept.dtype() != dscores.dtype()) {
    TANDEM_THROW(InvalidArgument, "attention_backward: kept ", kept.to_string(), " and dscores ",
                 dscores.to_string(), " differ in dtype");
  }
  const unsigned int blocks = row_blocks(probs, "attention_backward");
  if (blocks == 0) return;
  DeviceGuard guard(probs.device());
  dispatch_float(kept.dtype(), "attention_backward", [&](auto* tag) {
    using T = Element<decltype(tag)>;
    score_grads_kernel<T><<<blocks, kThreads, 0, stream(probs.device())>>>(
        static_cast<const float*>(probs.device_data()),
        static_cast<const float*>(dprobs.device_data()),
        static_cast<const float*>(lse.device_data()),
        static_cast<const float*>(row_dot.device_data()), static_cast<T*>(kept.device_data()),
        static_cast<T*>(dscores.device_data()), rows_of(rows, first));
  });
  check_launch("attention_backward");
}

}  // namespace tandem::cuda
