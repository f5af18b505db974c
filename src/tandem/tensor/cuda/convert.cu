// Element conversion and fill on the device, for tensor/device_memory.cc.
#include <cmath>
#include <limits>

#include "tandem/tensor/cuda/elements.cuh"
#include "tandem/tensor/cuda/memory.h"
#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

__device__ float load_any(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f32:
      return static_cast<const float*>(p)[i];
    case DType::bf16:
      return load(static_cast<const __nv_bfloat16*>(p), i);
    case DType::f16:
      return load(static_cast<const __half*>(p), i);
    case DType::i32:
      return static_cast<float>(static_cast<const int32_t*>(p)[i]);
    case DType::u8:
      return static_cast<float>(static_cast<const uint8_t*>(p)[i]);
    case DType::i64:
      return static_cast<float>(static_cast<const int64_t*>(p)[i]);
  }
  return 0.0f;
}

// Integers as the CPU stores them: rounded to nearest even, saturated, NaN to 0.
__device__ float saturated(float v, float lo, float hi) {
  if (isnan(v)) return 0.0f;
  const float r = nearbyintf(v);
  return r <= lo ? lo : (r >= hi ? hi : r);
}

// The same for the signed types: saturated to [-bound, bound) (2^31 or 2^63,
// exact in float), so that no out-of-range float reaches the conversion.
__device__ int64_t rounded_integer(float v, float bound, int64_t low, int64_t high) {
  if (isnan(v)) return 0;
  const float r = nearbyintf(v);
  return r <= -bound ? low : (r >= bound ? high : static_cast<int64_t>(r));
}

__device__ void store_any(void* p, DType dtype, int64_t i, float v) {
  switch (dtype) {
    case DType::f32:
      static_cast<float*>(p)[i] = v;
      break;
    case DType::bf16:
      store(static_cast<__nv_bfloat16*>(p), i, v);
      break;
    case DType::f16:
      store(static_cast<__half*>(p), i, v);
      break;
    case DType::i32:
      static_cast<int32_t*>(p)[i] =
          static_cast<int32_t>(rounded_integer(v, 2147483648.0f, INT32_MIN, INT32_MAX));
      break;
    case DType::u8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(saturated(v, 0.0f, 255.0f));
      break;
    case DType::i64:
      static_cast<int64_t*>(p)[i] =
          rounded_integer(v, 9223372036854775808.0f, INT64_MIN, INT64_MAX);
      break;
  }
}

__device__ bool is_integer(DType dtype) {
  return dtype == DType::i32 || dtype == DType::u8 || dtype == DType::i64;
}

__device__ int64_t load_integer(const void* p, DType dtype, int64_t i) {
  if (dtype == DType::i64) return static_cast<const int64_t*>(p)[i];
  if (dtype == DType::i32) return static_cast<const int32_t*>(p)[i];
  return static_cast<const uint8_t*>(p)[i];
}

// Between integer types exactly, saturating as the CPU does.
__device__ void store_integer(void* p, DType dtype, int64_t i, int64_t v) {
  if (dtype == DType::i64) static_cast<int64_t*>(p)[i] = v;
  if (dtype == DType::i32)
    static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v < INT32_MIN   ? INT32_MIN
                                                       : v > INT32_MAX ? INT32_MAX
                                                                       : v);
  if (dtype == DType::u8)
    static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

__global__ void convert_kernel(const void* src, DType s, void* dst, DType d, int64_t n) {
  if (is_integer(s) && is_integer(d)) {
    TANDEM_CUDA_FOR(i, n) store_integer(dst, d, i, load_integer(src, s, i));
  } else {
    TANDEM_CUDA_FOR(i, n) store_any(dst, d, i, load_any(src, s, i));
  }
}

// Between floating types, the element types known at compile time: the
// generic kernel's two switches per element ran at half the memory's speed,
// and mixed precision converts every weight and attention score each step.
template <typename S, typename D>
__global__ void convert_floating_kernel(const S* src, D* dst, int64_t n) {
  TANDEM_CUDA_FOR(i, n) store(dst, i, load(src, i));
}

__global__ void fill_kernel(void* dst, DType d, float value, int64_t n) {
  TANDEM_CUDA_FOR(i, n) store_any(dst, d, i, value);
}

}  // namespace

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
             Device device) {
  if (n <= 0) return;
  DeviceGuard guard(device);
  if (src_dtype == dst_dtype) {
    check(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(src_dtype),
                          cudaMemcpyDeviceToDevice, stream(device)),
          "cudaMemcpyAsync");
    return;
  }
  if (is_floating(src_dtype) && is_floating(dst_dtype)) {
    dispatch_float(src_dtype, "convert", [&](auto* src_tag) {
      dispatch_float(dst_dtype, "convert", [&](auto* dst_tag) {
        using S = Element<decltype(src_tag)>;
        using D = Element<decltype(dst_tag)>;
        convert_floating_kernel<S, D><<<blocks_for(n, 256), 256, 0, stream(device)>>>(
            static_cast<const S*>(src), static_cast<D*>(dst), n);
      });
    });
  } else {
    convert_kernel<<<blocks_for(n, 256), 256, 0, stream(device)>>>(src, src_dtype, dst, dst_dtype,
                                                                   n);
  }
  check_launch("convert");
}

void fill(void* dst, DType dtype, float value, int64_t n, Device device) {
  if (n <= 0) return;
  DeviceGuard guard(device);
  fill_kernel<<<blocks_for(n, 256), 256, 0, stream(device)>>>(dst, dtype, value, n);
  check_launch("fill");
}

}  // namespace tandem::cuda
