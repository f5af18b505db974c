#pragma once
// Naive double-precision reference implementations for kernel tests, written
// for clarity, not speed. Layouts match the kernels: images (N, H, W, C),
// conv weights (KH, KW, C, O).

#include <cstdint>
#include <functional>
#include <vector>

#include "tandem/kernels/conv.h"
#include "tandem/kernels/pool.h"
#include "tandem/tensor/tensor.h"

namespace tandem::testing {

std::vector<double> to_doubles(const Tensor& t);

// ||a - b|| / ||a|| over all elements (a and b of equal length): how far a
// result is from its reference as a whole.
double relative_error(const std::vector<float>& a, const std::vector<float>& b);

// batch x (M, K) . (K, N): a stored (K, M) when transpose_a, b stored (N, K)
// when transpose_b; one b for every batch element when shared_b.
struct MatmulShape {
  int64_t batch = 1, M = 1, K = 1, N = 1;
  bool transpose_a = false, transpose_b = false, shared_b = true;
};
std::vector<double> matmul_reference(const std::vector<double>& a, const std::vector<double>& b,
                                     const MatmulShape& shape);

// out (batch, M, N) against op(a) op(b) per batch element (a stored (K, M)
// when transpose_a, b (N, K) when transpose_b) summed in double over the
// same values: within f32 summation's bound, plus one rounding for a bf16
// out, at the columns n < columns(m) of each row m.
void expect_batched_product_near_double_sums(const Tensor& a, const Tensor& b, const Tensor& out,
                                             bool transpose_a, bool transpose_b,
                                             const std::function<int64_t(int64_t)>& columns);

// Every bf16 upper half (all 65,536) with lower halves at the rounding
// boundaries (ties either side of even, all ones, zero) and a random one:
// f32 values covering rounding, carries into the exponent, subnormals,
// infinities and NaN payloads, in bit order.
std::vector<float> bf16_rounding_cases();
// values in a random order (a Fisher-Yates shuffle seeded by seed): for
// vector loops, subnormals and NaN beside normal values.
std::vector<float> shuffled(std::vector<float> values, uint64_t seed);
// bits[i] == float_to_bf16(values[i]) for i < n, reporting the first
// mismatch's input bits through GoogleTest.
void expect_float_to_bf16_bits(const float* values, const uint16_t* bits, size_t n);

// A (batch, T, T) tensor of values in [-2, 2] with zeros above the
// diagonal, as dtype: attention's causal probabilities.
Tensor lower_triangle(int64_t batch, int64_t T, DType dtype, uint64_t seed);

// x (N, H, W, C), w (KH, KW, C, O) -> (N, OH, OW, O), and the gradients of
// sum(conv(x, w) * dy) with respect to x and w.
std::vector<double> conv2d_reference(const std::vector<double>& x, const Shape& xs,
                                     const std::vector<double>& w, const Shape& ws,
                                     const kernels::Conv2dGeometry& g);
std::vector<double> conv2d_backward_data_reference(const std::vector<double>& dy,
                                                   const std::vector<double>& w, const Shape& ws,
                                                   const Shape& xs,
                                                   const kernels::Conv2dGeometry& g);
std::vector<double> conv2d_backward_weights_reference(const std::vector<double>& x, const Shape& xs,
                                                      const std::vector<double>& dy,
                                                      const Shape& ws,
                                                      const kernels::Conv2dGeometry& g);

// Max or average (over the whole window, padding included) pooling of x
// (N, H, W, C); max pooling's gradient goes to each window's first maximum.
std::vector<double> pool2d_reference(const std::vector<double>& x, const Shape& xs,
                                     const kernels::Pool2dGeometry& g, bool max);
std::vector<double> max_pool2d_backward_reference(const std::vector<double>& x, const Shape& xs,
                                                  const std::vector<double>& dy,
                                                  const kernels::Pool2dGeometry& g);

// Scaled dot-product attention: q (B, H, T, D), k and v (B, H, S, D) ->
// (B, H, T, D), softmax(q k^T / sqrt(D)) v with the causal mask (query i sees
// keys j <= i) when asked, and dropout on the probabilities as the kernels'
// documented rule draws it: probability (h, i, j) is dropped when
// random_bits_at(seed, (h T + i) S + j) < p 2^32, the others scaled by
// 1 / (1 - p).
struct AttentionShape {
  int64_t B = 1, H = 1, T = 1, S = 1, D = 1;
  bool causal = true;
  double dropout = 0;
  uint64_t seed = 5;
};
std::vector<double> attention_reference(const std::vector<double>& q, const std::vector<double>& k,
                                        const std::vector<double>& v, const AttentionShape& a);
// The gradients of sum(attention(q, k, v) * dout) with respect to q, k and v.
std::vector<std::vector<double>> attention_gradient_reference(const std::vector<double>& q,
                                                              const std::vector<double>& k,
                                                              const std::vector<double>& v,
                                                              const AttentionShape& a,
                                                              const std::vector<double>& dout);

// Bilinear resize with half-pixel centres, clamped to the edge samples: x
// (N, H, W, C) -> (N, OH, OW, C).
std::vector<double> resize_reference(const std::vector<double>& x, const Shape& shape, int64_t OH,
                                     int64_t OW);

// |actual - expected| <= atol + rtol * |expected| elementwise, reporting the
// first mismatches through GoogleTest with `what` in the message.
void expect_close(const std::vector<double>& actual, const std::vector<double>& expected,
                  double atol, double rtol, const char* what);

// Tolerance for a result computed from dtype inputs with a reduction of length k.
double dtype_rtol(DType dtype);

}  // namespace tandem::testing
