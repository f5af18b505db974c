#pragma once
// Private: the arithmetic of collectives. Reduces element ranges of several
// ranks' buffers, accumulating floating types in float32 (one rounding at the
// end for bf16/f16) and i32 in int32 (wrapping, as MPI does).

#include <cstdint>

#include "tandem/comm/communicator.h"

namespace tandem::comm::kernels {

// For i in [begin, end): r = op over j < input_count of inputs[j][i] (mean:
// sum * scale), written to outputs[k][i] for every k < output_count. Inputs
// and outputs may alias (in place): each chunk is read completely before it
// is written. op is sum, max or min (mean is sum with scale = 1 / ranks).
void reduce_range(DType dtype, ReduceOp op, float scale, const void* const* inputs, int input_count,
                  void* const* outputs, int output_count, int64_t begin, int64_t end);

// Multiplies `count` elements of a host buffer by `scale` in place (a
// mean after a sum), with reduce_range's arithmetic and rounding.
void scale_in_place(DType dtype, void* data, int64_t count, float scale);

// The same over GPU buffers (device addresses) of `device`'s GPU or GPUs it
// can reach, queued on the calling thread's stream: synchronize(device)
// before the results are read elsewhere. Throws NotImplemented in a build
// without CUDA.
void reduce_range_on_device(Device device, DType dtype, ReduceOp op, float scale,
                            const void* const* inputs, int input_count, void* const* outputs,
                            int output_count, int64_t begin, int64_t end);

}  // namespace tandem::comm::kernels
