#pragma once
// Inputs with closed-form reductions for collective tests: rank r's element i
// is a small value, exact in every dtype, so a double-precision reference is
// exact and the only error allowed is the final rounding to the dtype.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tandem/comm/communicator.h"
#include "tandem/tensor/tensor.h"

namespace tandem::testing {

inline double collective_value(int rank, int64_t i, DType dtype) {
  const double v = static_cast<double>((i * 7 + rank * 3) % 11) - 5.0;
  return dtype == DType::i32 ? v * (rank + 1) : v + 0.25 * rank;
}

inline Tensor collective_input(int rank, int64_t n, DType dtype, int64_t first = 0) {
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    values[i] = static_cast<float>(collective_value(rank, first + i, dtype));
  return Tensor::from_floats(Shape{n}, values, dtype);
}

inline double collective_reference(comm::ReduceOp op, int ranks, int64_t i, DType dtype) {
  double acc = collective_value(0, i, dtype);
  for (int r = 1; r < ranks; ++r) {
    const double v = collective_value(r, i, dtype);
    acc = op == comm::ReduceOp::max   ? std::max(acc, v)
          : op == comm::ReduceOp::min ? std::min(acc, v)
                                      : acc + v;
  }
  return op == comm::ReduceOp::mean ? acc / ranks : acc;
}

// Allowed error: the rounding of the float32 result to the dtype, once per
// `roundings` (MPI's pairwise bf16/f16 reductions round after each step).
inline double collective_tolerance(DType dtype, double expected, int roundings = 1) {
  const double scale = std::max(1.0, std::abs(expected)) * roundings;
  switch (dtype) {
    case DType::bf16:
      return scale / 128;
    case DType::f16:
      return scale / 1024;
    case DType::f32:
      return std::abs(expected) * 1e-6;
    default:
      return 0;
  }
}

}  // namespace tandem::testing
