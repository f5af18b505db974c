#pragma once
// Matrix multiplication on oneDNN: out = act(op(a) . op(b) + bias), where op
// transposes when asked. f32 x f32 and bf16 x bf16 (AMX/AVX512-BF16 where the
// CPU has them), writing f32 or bf16. Legend: M rows of out, N columns, K the
// contracted dimension.

#include "tandem/kernels/activation.h"
#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

struct MatmulOptions {
  bool transpose_a = false;  // a is stored (K, M)
  bool transpose_b = false;  // b is stored (N, K)
  Activation activation = Activation::none;
  DType out_dtype = DType::f32;
};

// a: (M, K), b: (K, N), bias: (N,) f32 or undefined; returns (M, N) of
// options.out_dtype. a and b must share a dtype (f32 or bf16). Throws ShapeError.
Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& bias = {},
              const MatmulOptions& options = {});

// As above, writing into out (M, N), whose dtype sets the output type.
void matmul_into(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out,
                 const MatmulOptions& options = {});

// A linear layer's parameter gradients from its output gradient dy (rows,
// O) and input x (rows, I), both f32 or both bf16: dw (O, I) = dy^T x, of
// dw's dtype (f32 or bf16), and when db is non-null, db (O,) f32 = dy's
// column sums. bf16 into f32 runs on tandem's bf16 engines where
// detail::bf16_weight_gradient_applies (the AMX tiles; AVX512-BF16's dot
// products where dy's columns are at least x's; both for both widths in
// multiples of 16 and at least 256 rows), reading dy once for both.
void linear_backward_weights(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor* db);

// Batched: a (..., M, K), b (..., K, N) with the same leading dimensions, or
// b of rank 2 shared by every batch entry; returns (..., M, N). Transposes
// swap the last two dimensions of their operand. No bias; the activation
// applies as above.
Tensor batched_matmul(const Tensor& a, const Tensor& b, const MatmulOptions& options = {});
// As above, writing into out (..., M, N), whose dtype sets the output type.
void batched_matmul_into(const Tensor& a, const Tensor& b, Tensor& out,
                         const MatmulOptions& options = {});

// On CUDA devices, whether f32 products may run on TF32 Tensor Cores (10-bit
// mantissa inputs, f32 accumulation): on by default, as in TensorFlow; off,
// they round as the CPU's do. Process-wide; the CPU ignores it.
void set_matmul_allow_tf32(bool allow);
bool matmul_allow_tf32();

}  // namespace tandem::kernels
