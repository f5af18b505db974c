#pragma once
// Differentiable operations on Variables. Each runs its kernel forward and,
// when a gradient is needed, records how to compute its inputs' gradients.
// Shapes follow the kernels (tandem/kernels/*.h): images are (N, H, W, C),
// linear weights (out, in) as in PyTorch, conv weights (KH, KW, C, O).

#include <cstdint>
#include <optional>

#include "tandem/autograd/cross_replica.h"
#include "tandem/autograd/variable.h"
#include "tandem/base/random.h"
#include "tandem/kernels/activation.h"
#include "tandem/kernels/conv.h"
#include "tandem/kernels/pool.h"

namespace tandem {

// compute_dtype: the dtype the matrix unit works in. bf16 casts the input and
// the weights to bf16 for the matmul/conv (AMX or AVX512-BF16 through oneDNN);
// the weights' cast is cached until they change (Variable::value_as), so it
// happens once per step. output_dtype: the dtype of the result (activations
// between layers; default: the input's dtype). Weight gradients keep the
// weights' dtype (f32 master weights).
struct LinearOptions {
  kernels::Activation activation = kernels::Activation::none;
  DType compute_dtype = DType::f32;
  std::optional<DType> output_dtype;
};

struct Conv2dOptions {
  kernels::Conv2dGeometry geometry;
  kernels::Activation activation = kernels::Activation::none;
  DType compute_dtype = DType::f32;
  std::optional<DType> output_dtype;
};

// a (M, K) . b (K, N), with optional transposes.
Variable matmul(const Variable& a, const Variable& b, bool transpose_a = false,
                bool transpose_b = false);
// x (B, in), weight (out, in), bias (out,) or undefined -> act(x W^T + b) (B, out).
Variable linear(const Variable& x, const Variable& weight, const Variable& bias,
                const LinearOptions& options = {});
// x (N, H, W, C), weight (KH, KW, C, O), bias (O,) or undefined -> (N, OH, OW, O).
Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias,
                const Conv2dOptions& options = {});
Variable max_pool2d(const Variable& x, const kernels::Pool2dGeometry& geometry);

Variable relu(const Variable& x);
Variable gelu(const Variable& x);
// Inverted dropout with probability p; identity when !training or p == 0.
// The mask draws x.numel() positions from generator.
Variable dropout(const Variable& x, float p, bool training, Generator& generator);

// Broadcasting as kernels::add: b has a's shape, its trailing dims, or one element.
Variable add(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable scale(const Variable& a, float factor);
// Sum / mean of all elements: shape () f32.
Variable sum(const Variable& x);
Variable mean(const Variable& x);

Variable reshape(const Variable& x, const Shape& shape);
// (N, ...) -> (N, product of the rest).
Variable flatten(const Variable& x);
// Converts the dtype; the gradient is converted back.
Variable cast(const Variable& x, DType dtype);

// Mean (or sum / normalizer) softmax cross-entropy of logits (B, K) against
// i32 labels (B,): shape () f32. See kernels::softmax_cross_entropy.
Variable softmax_cross_entropy(const Variable& logits, const Tensor& labels,
                               double normalizer = 0.0);

// Normalises over the last dimension; gamma, beta (C,) f32.
Variable layer_norm(const Variable& x, const Variable& gamma, const Variable& beta, float eps);
// Batch norm over all dimensions but the last (channels). In training, uses the
// batch's statistics and updates running_mean/var (C,) f32 in place; otherwise
// normalises with them.
Variable batch_norm(const Variable& x, const Variable& gamma, const Variable& beta,
                    Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                    float eps);
// Synchronised batch norm (training): the statistics are over all replicas'
// rows, combined through `replicas`; running statistics are updated with the
// global ones, so they stay identical on every replica.
Variable sync_batch_norm(const Variable& x, const Variable& gamma, const Variable& beta,
                         Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                         CrossReplicaSum& replicas);
// Rows of weight (V, D) gathered by i32 indices -> (indices..., D).
Variable embedding(const Variable& weight, const Tensor& indices);

}  // namespace tandem
