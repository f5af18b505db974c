#pragma once
// The second pass of the deterministic column sums (reduce.cu's bias
// gradients, normalization.cu's gamma/beta gradients): partial (rows, cols)
// doubles, one row per chunk of the first pass, summed per column in chunk
// order and written as f32. A template so that each .cu file instantiates
// its own copy (no relocatable device code).
#include <cstdint>

#include "tandem/tensor/cuda/elements.cuh"

namespace tandem::cuda {

template <typename Out>
__global__ void sum_column_partials(const double* partial, int64_t rows, int64_t cols, Out* out) {
  TANDEM_CUDA_FOR(c, cols) {
    double acc = 0.0;
    for (int64_t r = 0; r < rows; ++r) acc += partial[r * cols + c];
    out[c] = static_cast<Out>(acc);
  }
}

}  // namespace tandem::cuda
