#pragma once
// Differentiable operations on Variables. Each runs its kernel forward and,
// when a gradient is needed, records how to compute its inputs' gradients.
// Shapes follow the kernels (tandem/kernels/*.h): images are (N, H, W, C),
// linear weights (out, in) as in PyTorch, conv weights (KH, KW, C, O).

#include <cstdint>
#include <optional>
#include <vector>

#include "tandem/autograd/cross_replica.h"
#include "tandem/autograd/variable.h"
#include "tandem/base/random.h"
#include "tandem/kernels/activation.h"
#include "tandem/kernels/conv.h"
#include "tandem/kernels/per_example_loss.h"
#include "tandem/kernels/pool.h"

namespace tandem {

// compute_dtype: the dtype the matrix unit works in. bf16 casts the input and
// the weights to bf16 for the matmul/conv (AMX or AVX512-BF16 through oneDNN);
// the weights' cast is cached until they change (Variable::value_as), so it
// happens once per step. output_dtype: the dtype of the result (activations
// between layers; default: the input's dtype, f32 for an integer input,
// which is read as its values, as Keras casts it). Weight gradients keep the
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
// a (..., M, K) . b (..., K, N) per batch entry; b may be rank 2, shared by
// every entry (its gradient is summed over them). Transposes swap an
// operand's last two dimensions. f32 or bf16 operands of one dtype.
Variable batched_matmul(const Variable& a, const Variable& b, bool transpose_a = false,
                        bool transpose_b = false);
// x (..., in), weight (out, in), bias (out,) or undefined -> act(x W^T + b)
// (..., out).
Variable linear(const Variable& x, const Variable& weight, const Variable& bias,
                const LinearOptions& options = {});
// x (N, H, W, C), weight (KH, KW, C, O), bias (O,) or undefined -> (N, OH, OW, O).
Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias,
                const Conv2dOptions& options = {});
Variable max_pool2d(const Variable& x, const kernels::Pool2dGeometry& geometry);
// relu(max_pool2d(x)) in one op (values and gradients alike): one pass over
// the windows, and relu's backward folded into the pooling's (on the CPU;
// the composition on a GPU).
Variable max_pool2d_relu(const Variable& x, const kernels::Pool2dGeometry& geometry);
// relu(max_pool2d(conv2d(x, weight, bias))) (options.activation none or
// relu: a ReLU commutes with the pooling), in one pass where
// kernels::conv2d_max_pool_fuses (a first layer's few channels, windows
// that do not overlap): the convolution's output is never stored, nor its
// gradient.
// The composed ops' bits, values and gradients alike; elsewhere it runs
// them.
Variable conv2d_max_pool_relu(const Variable& x, const Variable& weight, const Variable& bias,
                              const Conv2dOptions& options, const kernels::Pool2dGeometry& pool);
// Windows averaged with padding counted (PyTorch's count_include_pad=True).
Variable avg_pool2d(const Variable& x, const kernels::Pool2dGeometry& geometry);
// (N, H, W, C) -> (N, C).
Variable global_avg_pool(const Variable& x);

Variable relu(const Variable& x);
Variable gelu(const Variable& x);       // the erf form
Variable gelu_tanh(const Variable& x);  // the tanh approximation
Variable silu(const Variable& x);
// Any activation; none returns x.
Variable activation(const Variable& x, kernels::Activation activation);
// Inverted dropout with probability p; identity when !training or p == 0.
// The mask draws x.numel() positions from generator.
Variable dropout(const Variable& x, float p, bool training, Generator& generator);

// Broadcasting as kernels::add: b has a's shape, its trailing dims, or one element.
Variable add(const Variable& a, const Variable& b);
// relu(add(a, b)) in one pass each way (a residual block's end), the
// same values and gradients; operands of different shapes or dtypes take
// the two ops.
Variable add_relu(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);  // a - b
Variable mul(const Variable& a, const Variable& b);
Variable div(const Variable& a, const Variable& b);  // a / b
Variable scale(const Variable& a, float factor);
// Pointwise functions for losses of one's own (kernels/unary.h; CPU only
// for now), in x's dtype.
Variable exp(const Variable& x);
Variable log(const Variable& x);
Variable sigmoid(const Variable& x);
Variable tanh(const Variable& x);
// Sum / mean of all elements: shape () f32.
Variable sum(const Variable& x);
Variable mean(const Variable& x);
// Sum / mean along one axis (negative counts from the end), f32; keepdim
// keeps that axis with size 1 (so that the result broadcasts back).
Variable sum(const Variable& x, int axis, bool keepdim = false);
Variable mean(const Variable& x, int axis, bool keepdim = false);

Variable reshape(const Variable& x, const Shape& shape);
// Over the last dimension.
Variable softmax(const Variable& x);
Variable log_softmax(const Variable& x);
// y.dim(i) == x.dim(order[i]) (a copy); transpose swaps two dimensions
// (negative ones count from the end).
Variable permute(const Variable& x, const std::vector<int>& order);
Variable transpose(const Variable& x, int dim0, int dim1);
// Elements [begin, end) of dimension axis; split cuts axis into pieces of
// the given sizes (which must add up to it); concat joins along axis.
Variable slice(const Variable& x, int axis, int64_t begin, int64_t end);
std::vector<Variable> split(const Variable& x, int axis, const std::vector<int64_t>& sizes);
Variable concat(const std::vector<Variable>& parts, int axis);
// (N, ...) -> (N, product of the rest).
Variable flatten(const Variable& x);
// Converts the dtype; the gradient is converted back.
Variable cast(const Variable& x, DType dtype);

// Mean (or sum / normalizer) softmax cross-entropy of logits (B, K) against
// i32 labels (B,): shape () f32. See kernels::softmax_cross_entropy.
Variable softmax_cross_entropy(const Variable& logits, const Tensor& labels,
                               double normalizer = 0.0);

// Per-example losses (tandem/kernels/per_example_loss.h): each returns (N,)
// f32, example n's loss the mean over its positions, for a caller that sums
// them and divides by the global batch size. Gradients flow to the first
// argument only, in its dtype; labels and targets are constants. They throw
// ShapeError naming both shapes when the arguments do not fit.
using kernels::CrossEntropyOptions;

// logits (N, ..., K) f32/bf16/f16, labels (N, ...) i32 with the logits' dims
// but the last: the mean token cross-entropy over each example's positions
// whose label is not options.ignore_index (0 when all are), with PyTorch's
// label smoothing. Throws InvalidArgument for a label outside [0, K) that is
// not ignored, naming its position and value.
Variable softmax_cross_entropy_per_example(const Variable& logits, const Tensor& labels,
                                           const CrossEntropyOptions& options = {});
// logits (N, ...) floating, targets of the same shape in [0, 1]: the mean of
// max(x, 0) - x t + log(1 + exp(-|x|)) over each example's elements.
Variable binary_cross_entropy_with_logits_per_example(const Variable& logits,
                                                      const Tensor& targets);
// predictions (N, ...) floating, targets f32 or i32 of the same shape (or
// (N,) against (N, 1)): the mean of (p - t)^2, |p - t| (subgradient 0 at 0),
// or PyTorch's HuberLoss(delta) over each example's elements. huber throws
// InvalidArgument for delta <= 0.
Variable mean_squared_error_per_example(const Variable& predictions, const Tensor& targets);
Variable mean_absolute_error_per_example(const Variable& predictions, const Tensor& targets);
Variable huber_per_example(const Variable& predictions, const Tensor& targets, double delta = 1.0);

// x / sqrt(mean(x^2) + eps) * gamma over the last dimension; gamma (C,) f32.
Variable rms_norm(const Variable& x, const Variable& gamma, float eps);
// Normalises over the last dimension; gamma, beta (C,) f32.
Variable layer_norm(const Variable& x, const Variable& gamma, const Variable& beta, float eps);
// Batch norm over all dimensions but the last (channels). In training, uses the
// batch's statistics and updates running_mean/var (C,) f32 in place; otherwise
// normalises with them.
Variable batch_norm(const Variable& x, const Variable& gamma, const Variable& beta,
                    Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                    float eps);
// relu(batch_norm(...)), in one pass forward and backward where the kernels
// fuse them (kernels::batch_norm_fuses_relu: training in f32 and bf16).
Variable batch_norm_relu(const Variable& x, const Variable& gamma, const Variable& beta,
                         Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                         float eps);
// add_relu(batch_norm(...), residual), in one pass forward and backward
// where the kernels fuse them (kernels::batch_norm_fuses_add_relu: training
// in f32 and bf16 with channels a multiple of 16 on AVX-512), with the
// unfused ops' bits.
Variable batch_norm_add_relu(const Variable& x, const Variable& gamma, const Variable& beta,
                             const Variable& residual, Tensor& running_mean, Tensor& running_var,
                             bool training, float momentum, float eps);
// Synchronised batch norm (training): the statistics are over all replicas'
// rows, combined through `replicas`; running statistics are updated with the
// global ones, so they stay identical on every replica.
Variable sync_batch_norm(const Variable& x, const Variable& gamma, const Variable& beta,
                         Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                         CrossReplicaSum& replicas);
// Fused scaled dot-product attention (kernels/attention.h): q (B, H, T, D),
// k and v (B, H, S, D) -> (B, H, T, D) in q's dtype, the matmuls in
// compute_dtype. Dropout on the probabilities applies in training only and
// then draws B*H*T*S positions from generator (required).
struct AttentionOptions {
  bool causal = true;
  float dropout = 0.0f;
  bool training = false;
  DType compute_dtype = DType::f32;
  float scale = 0.0f;  // 0: 1 / sqrt(D)
};
Variable attention(const Variable& q, const Variable& k, const Variable& v,
                   const AttentionOptions& options = {}, Generator* generator = nullptr);
// Self-attention on q, k and v packed along a first axis of 3: qkv (3, B,
// H, T, D) -> (B, H, T, D). Same result as attention() on the thirds, but
// the thirds are views of qkv, and their gradients are written into one
// tensor (split() would copy each third, and add three zero-padded
// gradients in backward).
Variable attention_packed(const Variable& qkv, const AttentionOptions& options = {},
                          Generator* generator = nullptr);
// Self-attention on q, k and v interleaved per position as a fused QKV
// projection writes them: qkv (B, T, 3, H, D) -> (B, T, H, D), the layout
// an output projection reads as (B, T, H * D). Same values and dropout
// positions as attention_packed() on qkv permuted to (3, B, H, T, D), and
// its output permuted back, without those copies.
Variable attention_interleaved(const Variable& qkv, const AttentionOptions& options = {},
                               Generator* generator = nullptr);

// Rows of weight (V, D) gathered by i32 indices -> (indices..., D).
Variable embedding(const Variable& weight, const Tensor& indices);

}  // namespace tandem
