#pragma once
// Private: per-column sums over rows in double, the rows taken in blocks of
// a fixed size whose partial sums are added in block order, so that the
// result does not depend on the thread count (normalization.cc's norms,
// layer_norm_rows.cc).

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tandem/base/parallel.h"

namespace tandem::kernels::detail {

// Rows per block of a column reduction.
inline constexpr int64_t kRowBlock = 256;

// Sums per-row contributions into `width` doubles: add_row(r, acc) adds row r.
template <typename AddRow>
std::vector<double> reduce_rows(int64_t rows, int64_t width, AddRow add_row) {
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  std::vector<double> partial(static_cast<size_t>(blocks * width), 0.0);
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double* acc = partial.data() + b * width;
      const int64_t end = std::min(rows, (b + 1) * kRowBlock);
      for (int64_t r = b * kRowBlock; r < end; ++r) add_row(r, acc);
    }
  });
  std::vector<double> total(static_cast<size_t>(width), 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t c = 0; c < width; ++c) total[c] += partial[b * width + c];
  }
  return total;
}

}  // namespace tandem::kernels::detail
