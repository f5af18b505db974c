#pragma once
// Private: GELU and its gradient, both forms (erf and tanh), 16 lanes at a
// time on AVX-512 over f32 or bf16 storage. oneDNN's eltwise took 13-26 ms
// per call on gpt's MLP hidden layer (16,384 x 1,024) at 1 thread, 12% of
// its bf16 step on an AMX Xeon; these, prefetching ahead of their loads,
// take 8 (forward) and 9.7 ms (backward) computed in bf16, and about half
// that looked up (Bf16Path) in kernels_bench (much less on a product's
// output in gpt's step; docs/performance.md). They also serve the
// products' GELU epilogues (gelu_follows_product).
//
// Accuracy against the exact functions: the tanh form within a few float
// ulp (tanh through one exponential); the erf form within about 1e-7
// absolute in the normal CDF (Abramowitz and Stegun 7.1.26, as oneDNN),
// so tiny outputs far out on the negative side carry that absolute error.
// Specials as the formulas give them: +-infinity and NaN as 0.5 x (1 +
// erf(x / sqrt 2)) and 0.5 x (1 + tanh(...)) evaluate in float.

#include "tandem/kernels/activation.h"
#include "tandem/tensor/tensor.h"

namespace tandem::kernels::detail {

// Whether the functions below take x: a CPU tensor of f32 or bf16 on a
// CPU with AVX-512.
bool gelu_avx512_supported(const Tensor& x);

// How bf16 results are made: fastest, looked up in tables of the results
// for every bf16 input (computed once, on first use); or computed element
// by element. The same bits (tests compare the two).
enum class Bf16Path { fastest, computed };

// form: Activation::gelu (erf) or Activation::gelu_tanh.
Tensor gelu_avx512(Activation form, const Tensor& x, Bf16Path path = Bf16Path::fastest);
// dy * gelu'(x); dy matches x (checked by the caller).
Tensor gelu_backward_avx512(Activation form, const Tensor& dy, const Tensor& x,
                            Bf16Path path = Bf16Path::fastest);

// Whether a oneDNN product asked for `activation` as its epilogue (a
// matmul or convolution of `operands` writing `out` on `device`) applies
// it after the product instead, with the separate op's kernel (these
// loops, or oneDNN's eltwise without AVX-512): then a layer gives the same
// bits fused as unfused (a recomputed forward runs fused where the
// recorded one did not, and checkpointing promises the same gradients;
// oneDNN's GELU epilogue rounds a bf16 output once where the separate op
// rounds the product and then the GELU). Not for f32 operands into a bf16
// output: that product is defined as rounded once, GELU included.
bool gelu_follows_product(Activation activation, DType operands, DType out, Device device);
// y = activate(form, y) with the separate op's kernel, in place on these
// loops.
void gelu_in_place(Activation form, Tensor& y);

}  // namespace tandem::kernels::detail
