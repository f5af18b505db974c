#pragma once
// Floating-point work done by the matrix kernels (matmul and the three
// convolution passes), counted analytically per call (2 x multiply-adds) so
// that a monitor can turn a step's count into achieved FLOP/s. One relaxed
// atomic add per kernel call, process-wide; elementwise kernels are not
// counted (they are memory-bound and a rounding error in the total).
// Also measures a device's peak: the rate of a large matmul.

#include <cstdint>

#include "tandem/tensor/device.h"
#include "tandem/tensor/dtype.h"

namespace tandem::kernels {

// Total counted since the process started.
int64_t flops_executed();
void count_flops(int64_t flops);

// The matmul rate (FLOP/s) of square n x n products in dtype (f32 or bf16)
// on `device` (a CPU device: the calling thread's intra-op threads), the
// best of repeats lasting at least min_seconds in all. On a GPU each repeat
// queues enough products to last a few milliseconds and waits for them, so
// launch latency does not count; f32 there follows set_matmul_allow_tf32.
// Throws InvalidArgument for other dtypes or n < 1.
double measure_matmul_peak(DType dtype, int64_t n = 1024, double min_seconds = 0.3,
                           Device device = cpu_device());

}  // namespace tandem::kernels
