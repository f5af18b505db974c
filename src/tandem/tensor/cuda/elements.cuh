#pragma once
// Element access for the CUDA kernels: every floating dtype is loaded as
// float and stored back rounded to nearest even, as the CPU kernels do
// (tensor/convert.h), so the two backends compute in the same precision.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tandem/base/error.h"
#include "tandem/tensor/dtype.h"

namespace tandem::cuda {

__device__ __forceinline__ float load(const float* p, int64_t i) {
  return p[i];
}
__device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ float load(const __half* p, int64_t i) {
  return __half2float(p[i]);
}

__device__ __forceinline__ void store(float* p, int64_t i, float v) {
  p[i] = v;
}
__device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void store(__half* p, int64_t i, float v) {
  p[i] = __float2half_rn(v);
}

// Grid-stride loop over [0, n).
#define TANDEM_CUDA_FOR(i, n)                                                            \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Calls body with a null pointer of the floating element type of `dtype`
// (float, __nv_bfloat16 or __half) to pick a template instantiation:
//   dispatch_float(t.dtype(), "relu", [&](auto* tag) { using T = ...; });
template <typename Body>
void dispatch_float(DType dtype, const char* op, Body&& body) {
  switch (dtype) {
    case DType::f32:
      body(static_cast<float*>(nullptr));
      return;
    case DType::bf16:
      body(static_cast<__nv_bfloat16*>(nullptr));
      return;
    case DType::f16:
      body(static_cast<__half*>(nullptr));
      return;
    default:
      TANDEM_THROW(InvalidArgument, op, ": expected an f32, bf16 or f16 tensor, got ",
                   dtype_name(dtype));
  }
}

template <typename T>
using Element = std::remove_pointer_t<T>;

// Sum over a block of `threads` (a power of two up to 1024) through shared
// memory; every thread gets the total. `scratch` holds blockDim.x values.
template <typename V>
__device__ V block_sum(V value, V* scratch) {
  scratch[threadIdx.x] = value;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];
    __syncthreads();
  }
  const V total = scratch[0];
  __syncthreads();
  return total;
}

template <typename V>
__device__ V block_max(V value, V* scratch) {
  scratch[threadIdx.x] = value;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + s]);
    __syncthreads();
  }
  const V total = scratch[0];
  __syncthreads();
  return total;
}

}  // namespace tandem::cuda
