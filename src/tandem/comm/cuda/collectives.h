#pragma once
// The element-wise reduction under the in-process collectives, for buffers
// in GPU memory (comm/detail/reduce_kernels.cc calls it for a cuda device).

#include <cstdint>

#include "tandem/tensor/device.h"
#include "tandem/tensor/dtype.h"

namespace tandem::cuda {

// The in-process collectives' reduction over GPU buffers (comm/cuda/collectives.cu):
// for i in [begin, end), outputs[k][i] = op over inputs[r][i] (times scale
// for floating dtypes), queued on the calling thread's stream for `device`.
// Buffers on another GPU are reached by peer access, or refused.
enum class Reduction : uint8_t { sum, max, min };
void reduce_range(Device device, DType dtype, Reduction op, float scale, const void* const* inputs,
                  int input_count, void* const* outputs, int output_count, int64_t begin,
                  int64_t end);

}  // namespace tandem::cuda
