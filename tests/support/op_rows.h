#pragma once
// The op table's rows by family (tests/support/op_rows_*.cc) and the index
// arithmetic their double references share.

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <vector>

#include "support/op_table.h"
#include "tandem/kernels/activation.h"

namespace tandem::testing {

void add_dense_rows(std::vector<OpCase>& rows);
void add_pointwise_rows(std::vector<OpCase>& rows);
void add_layout_rows(std::vector<OpCase>& rows);
void add_normalization_rows(std::vector<OpCase>& rows);
void add_loss_rows(std::vector<OpCase>& rows);
void add_update_and_metric_rows(std::vector<OpCase>& rows);

// Row-major offset of `index` in `shape`.
inline size_t offset(const Shape& shape, std::initializer_list<int64_t> index) {
  int64_t at = 0;
  int axis = 0;
  for (int64_t i : index) at = at * shape.dim(axis++) + i;
  return static_cast<size_t>(at);
}

// Labels as the kernels take them (the table hands every input over in double).
inline std::vector<int32_t> as_labels(const Doubles& labels) {
  std::vector<int32_t> out;
  for (double l : labels) out.push_back(static_cast<int32_t>(l));
  return out;
}

// y = f(x) element by element.
template <typename F>
Doubles map(Doubles x, F f) {
  for (double& v : x) v = f(v);
  return x;
}

// Rows of length n: f(row pointer in, row pointer out).
template <typename F>
Doubles map_rows(const Doubles& x, size_t n, F f) {
  Doubles y(x.size());
  for (size_t r = 0; r < x.size(); r += n) f(x.data() + r, y.data() + r);
  return y;
}

inline double gelu_erf(double x) {
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}
inline double gelu_tanh_of(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
inline double silu_of(double x) {
  return x / (1 + std::exp(-x));
}
inline double activation_of(kernels::Activation a, double x) {
  switch (a) {
    case kernels::Activation::relu:
      return std::max(x, 0.0);
    case kernels::Activation::gelu:
      return gelu_erf(x);
    case kernels::Activation::gelu_tanh:
      return gelu_tanh_of(x);
    case kernels::Activation::silu:
      return silu_of(x);
    default:
      return x;
  }
}

}  // namespace tandem::testing
