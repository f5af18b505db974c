#pragma once
// Naive double-precision reference implementations for kernel tests, written
// for clarity, not speed. Layouts match the kernels: images (N, H, W, C),
// conv weights (KH, KW, C, O).

#include <cstdint>
#include <vector>

#include "tandem/kernels/conv.h"
#include "tandem/kernels/pool.h"
#include "tandem/tensor/tensor.h"

namespace tandem::testing {

std::vector<double> to_doubles(const Tensor& t);

// ||a - b|| / ||a|| over all elements (a and b of equal length): how far a
// result is from its reference as a whole.
double relative_error(const std::vector<float>& a, const std::vector<float>& b);

// (M, K) x (K, N) with optional transposes (a stored (K, M), b stored (N, K)).
std::vector<double> matmul_reference(const Tensor& a, const Tensor& b, bool transpose_a,
                                     bool transpose_b);

std::vector<double> conv2d_reference(const Tensor& x, const Tensor& w,
                                     const kernels::Conv2dGeometry& g);
// Gradients of sum(conv(x, w) * dy) with respect to x and w.
std::vector<double> conv2d_backward_data_reference(const Tensor& dy, const Tensor& w,
                                                   const Shape& x_shape,
                                                   const kernels::Conv2dGeometry& g);
std::vector<double> conv2d_backward_weights_reference(const Tensor& x, const Tensor& dy,
                                                      const Shape& w_shape,
                                                      const kernels::Conv2dGeometry& g);

// Bilinear resize with half-pixel centres, clamped to the edge samples: x
// (N, H, W, C) -> (N, OH, OW, C).
std::vector<double> resize_reference(const std::vector<double>& x, const Shape& shape, int64_t OH,
                                     int64_t OW);

std::vector<double> max_pool2d_reference(const Tensor& x, const kernels::Pool2dGeometry& g);

// |actual - expected| <= atol + rtol * |expected| elementwise, reporting the
// first mismatches through GoogleTest with `what` in the message.
void expect_close(const std::vector<double>& actual, const std::vector<double>& expected,
                  double atol, double rtol, const char* what);

// Tolerance for a result computed from dtype inputs with a reduction of length k.
double dtype_rtol(DType dtype);

}  // namespace tandem::testing
