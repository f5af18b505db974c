#include "tandem/comm/detail/reduce_kernels.h"

#include <algorithm>
#include <cstring>

#include "tandem/base/error.h"
#include "tandem/base/target_clones.h"
#include "tandem/comm/detail/gpu_backend.h"
#include "tandem/tensor/convert.h"

namespace tandem::comm::kernels {
namespace {

// Elements per chunk: the float accumulator (8 KiB) stays in L1 while every
// rank's chunk streams through once.
constexpr int64_t kChunk = 2048;

TANDEM_TARGET_CLONES void load_f32(float* acc, const float* src, int64_t n) {
  std::memcpy(acc, src, static_cast<size_t>(n) * sizeof(float));
}
TANDEM_TARGET_CLONES void load_bf16(float* acc, const uint16_t* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = bf16_to_float(src[i]);
}
TANDEM_TARGET_CLONES void load_f16(float* acc, const uint16_t* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = f16_to_float(src[i]);
}

TANDEM_TARGET_CLONES void add_f32(float* acc, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += src[i];
}
TANDEM_TARGET_CLONES void max_f32(float* acc, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], src[i]);
}
TANDEM_TARGET_CLONES void min_f32(float* acc, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = std::min(acc[i], src[i]);
}
TANDEM_TARGET_CLONES void add_bf16(float* acc, const uint16_t* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += bf16_to_float(src[i]);
}
TANDEM_TARGET_CLONES void add_f16(float* acc, const uint16_t* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += f16_to_float(src[i]);
}

TANDEM_TARGET_CLONES void store_f32(float* dst, const float* acc, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) dst[i] = acc[i] * scale;
}
TANDEM_TARGET_CLONES void store_bf16(uint16_t* dst, const float* acc, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(acc[i] * scale);
}
TANDEM_TARGET_CLONES void store_f16(uint16_t* dst, const float* acc, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_f16(acc[i] * scale);
}

// The two-rank f32 sum, the common gradient case, fused into one pass:
// a[i] = b[i] = a[i] + b[i] (or into separate outputs).
TANDEM_TARGET_CLONES void sum2_f32(const float* a, const float* b, float* out0, float* out1,
                                   int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) {
    const float s = (a[i] + b[i]) * scale;
    out0[i] = s;
    out1[i] = s;
  }
}

void combine(DType dtype, ReduceOp op, float* acc, const void* src, int64_t n) {
  if (dtype == DType::f32) {
    const auto* s = static_cast<const float*>(src);
    if (op == ReduceOp::max) return max_f32(acc, s, n);
    if (op == ReduceOp::min) return min_f32(acc, s, n);
    return add_f32(acc, s, n);
  }
  const auto* s = static_cast<const uint16_t*>(src);
  if (op == ReduceOp::sum || op == ReduceOp::mean) {
    return dtype == DType::bf16 ? add_bf16(acc, s, n) : add_f16(acc, s, n);
  }
  float tmp[kChunk];
  dtype == DType::bf16 ? load_bf16(tmp, s, n) : load_f16(tmp, s, n);
  op == ReduceOp::max ? max_f32(acc, tmp, n) : min_f32(acc, tmp, n);
}

void reduce_floating(DType dtype, ReduceOp op, float scale, const void* const* inputs,
                     int input_count, void* const* outputs, int output_count, int64_t begin,
                     int64_t end) {
  const size_t element = dtype_size(dtype);
  auto at = [&](const void* base, int64_t i) {
    return static_cast<const char*>(base) + i * element;
  };
  if (dtype == DType::f32 && input_count == 2 && output_count <= 2 &&
      (op == ReduceOp::sum || op == ReduceOp::mean)) {
    float* out0 = static_cast<float*>(outputs[0]) + begin;
    float* out1 = static_cast<float*>(outputs[output_count - 1]) + begin;
    sum2_f32(static_cast<const float*>(inputs[0]) + begin,
             static_cast<const float*>(inputs[1]) + begin, out0, out1, end - begin, scale);
    return;
  }
  float acc[kChunk];
  for (int64_t c = begin; c < end; c += kChunk) {
    const int64_t n = std::min(kChunk, end - c);
    switch (dtype) {
      case DType::f32:
        load_f32(acc, static_cast<const float*>(static_cast<const void*>(at(inputs[0], c))), n);
        break;
      case DType::bf16:
        load_bf16(acc, reinterpret_cast<const uint16_t*>(at(inputs[0], c)), n);
        break;
      default:
        load_f16(acc, reinterpret_cast<const uint16_t*>(at(inputs[0], c)), n);
        break;
    }
    for (int j = 1; j < input_count; ++j) combine(dtype, op, acc, at(inputs[j], c), n);
    for (int k = 0; k < output_count; ++k) {
      void* dst = static_cast<char*>(outputs[k]) + c * element;
      switch (dtype) {
        case DType::f32:
          store_f32(static_cast<float*>(dst), acc, n, scale);
          break;
        case DType::bf16:
          store_bf16(static_cast<uint16_t*>(dst), acc, n, scale);
          break;
        default:
          store_f16(static_cast<uint16_t*>(dst), acc, n, scale);
          break;
      }
    }
  }
}

void reduce_i32(ReduceOp op, const void* const* inputs, int input_count, void* const* outputs,
                int output_count, int64_t begin, int64_t end) {
  int32_t acc[kChunk];
  for (int64_t c = begin; c < end; c += kChunk) {
    const int64_t n = std::min(kChunk, end - c);
    std::memcpy(acc, static_cast<const int32_t*>(inputs[0]) + c, static_cast<size_t>(n) * 4);
    for (int j = 1; j < input_count; ++j) {
      const int32_t* s = static_cast<const int32_t*>(inputs[j]) + c;
      for (int64_t i = 0; i < n; ++i) {
        if (op == ReduceOp::max) {
          acc[i] = std::max(acc[i], s[i]);
        } else if (op == ReduceOp::min) {
          acc[i] = std::min(acc[i], s[i]);
        } else {
          // Wrap around on overflow, as MPI_SUM on MPI_INT does.
          acc[i] =
              static_cast<int32_t>(static_cast<uint32_t>(acc[i]) + static_cast<uint32_t>(s[i]));
        }
      }
    }
    for (int k = 0; k < output_count; ++k) {
      std::memcpy(static_cast<int32_t*>(outputs[k]) + c, acc, static_cast<size_t>(n) * 4);
    }
  }
}

}  // namespace

void reduce_range(DType dtype, ReduceOp op, float scale, const void* const* inputs, int input_count,
                  void* const* outputs, int output_count, int64_t begin, int64_t end) {
  if (begin >= end || output_count == 0) return;
  if (dtype == DType::i32)
    return reduce_i32(op, inputs, input_count, outputs, output_count, begin, end);
  reduce_floating(dtype, op, scale, inputs, input_count, outputs, output_count, begin, end);
}

void scale_in_place(DType dtype, void* data, int64_t count, float scale) {
  const void* in = data;
  reduce_range(dtype, ReduceOp::sum, scale, &in, 1, &data, 1, 0, count);
}

void reduce_range_on_device(Device device, DType dtype, ReduceOp op, float scale,
                            const void* const* inputs, int input_count, void* const* outputs,
                            int output_count, int64_t begin, int64_t end) {
  detail::require_gpu_backend("collectives over GPU buffers")
      .reduce_range(device, dtype, op, scale, inputs, input_count, outputs, output_count, begin,
                    end);
}

}  // namespace tandem::comm::kernels
