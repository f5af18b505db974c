#pragma once
// The CUDA implementations of the kernels the public interface
// (tandem/kernels/*.h) dispatches to for tensors on a cuda device; same
// signatures and meaning, documented there. Every tensor of a call must be
// on the same device. Work goes to the calling thread's stream
// (tensor/cuda/runtime.h); results that the host reads (a loss value, a count, a
// norm) synchronise it.

#include <cstdint>
#include <span>
#include <vector>

#include "tandem/kernels/activation.h"
#include "tandem/kernels/backend_info.h"
#include "tandem/kernels/conv.h"
#include "tandem/kernels/detail/attention_rows.h"
#include "tandem/kernels/dropout.h"
#include "tandem/kernels/loss.h"
#include "tandem/kernels/matmul.h"
#include "tandem/kernels/normalization.h"
#include "tandem/kernels/optimizer_update.h"
#include "tandem/kernels/per_example_loss.h"
#include "tandem/kernels/pool.h"
#include "tandem/tensor/tensor.h"

namespace tandem::cuda {

// The GPUs and the CUDA library versions, for kernels::backend_info()
// (kernels/cuda/info.cc).
void describe(kernels::BackendInfo& info);

// Matrix products on cuBLASLt (kernels/cuda/matmul.cc), after kernels/matmul.cc
// has checked the operands: `batch` products of op(a) (M, K) and op(b)
// (K, N) into out (M, N); b is shared by the batch when b_batch is 1.
struct MatmulProblem {
  int64_t batch, b_batch, M, K, N;
};
void run_matmul(const MatmulProblem& problem, const Tensor& a, const Tensor& b, const Tensor& bias,
                Tensor& out, const kernels::MatmulOptions& options);

// Pointwise (cuda/elementwise.cu).
Tensor add(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& a, float factor);
void add_into(Tensor& dst, const Tensor& src, float alpha);
Tensor activate(kernels::Activation activation, const Tensor& x);
Tensor activation_backward(kernels::Activation activation, const Tensor& dy, const Tensor& saved);
bool scale_and_check_finite(const std::vector<Tensor>& tensors, float factor);
// out (M, N) += bias (N) and then the activation, in place: matmul's epilogue.
void bias_activation_inplace(Tensor& out, const Tensor& bias, kernels::Activation activation);

// Reductions (cuda/reduce.cu), accumulated in double in a fixed order.
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
double squared_norm(const Tensor& x);
Tensor sum_to_shape(const Tensor& x, const Shape& target);

// Row-wise softmax and the fused cross-entropy (cuda/softmax.cu).
Tensor softmax(const Tensor& x);
Tensor softmax_backward(const Tensor& dy, const Tensor& y);
Tensor log_softmax(const Tensor& x);
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y);
kernels::CrossEntropyResult softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                                  double normalizer);
Tensor softmax_cross_entropy_backward(const Tensor& probabilities, const Tensor& labels,
                                      float grad_loss, double normalizer, DType out_dtype);
int64_t count_correct(const Tensor& logits, const Tensor& labels);

// Per-example cross-entropy (cuda/per_example_loss.cu).
kernels::CrossEntropyPerExample softmax_cross_entropy_per_example(
    const Tensor& logits, const Tensor& labels, const kernels::CrossEntropyOptions& options);
Tensor softmax_cross_entropy_per_example_backward(const Tensor& grad_loss, const Tensor& logits,
                                                  const Tensor& labels, const Tensor& log_sum_exp,
                                                  const kernels::CrossEntropyOptions& options);

// Embedding lookup and its scatter-add backward (cuda/embedding.cu).
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor embedding_backward(const Tensor& dy, const Tensor& indices, int64_t vocabulary);

// Layout copies (cuda/layout.cu): `rows` rows of `bytes` bytes, src's rows
// src_pitch bytes apart and dst's dst_pitch apart; and y = x permuted by
// order, whose first `kept` dimensions move (the others stay in place).
void copy_rows(Device device, const void* src, int64_t src_pitch, void* dst, int64_t dst_pitch,
               int64_t bytes, int64_t rows);
void permute_into(const Tensor& x, std::span<const int> order, int kept, Tensor& y);

// Layer norm and RMSNorm (cuda/normalization.cu), statistics in double.
kernels::NormResult layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps);
kernels::NormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                       const Tensor& rstd, const Tensor& gamma);
kernels::NormResult rms_norm(const Tensor& x, const Tensor& gamma, float eps);
kernels::NormGrads rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& rstd,
                                     const Tensor& gamma);

// Batch norm's split parts (cuda/batch_norm.cu); the single-device
// batch_norm_train/backward compose them on the GPU.
kernels::Moments batch_norm_moments(const Tensor& x);
Tensor inverse_std(const Tensor& variance, float eps);
Tensor batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& rstd,
                        const Tensor& gamma, const Tensor& beta);
void update_running_moments(Tensor& running_mean, Tensor& running_var,
                            const kernels::Moments& batch, float momentum);
kernels::BatchNormSums batch_norm_backward_sums(const Tensor& dy, const Tensor& x,
                                                const Tensor& mean, const Tensor& rstd);
Tensor batch_norm_backward_dx(const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& rstd, const Tensor& gamma,
                              const kernels::BatchNormSums& sums, int64_t count);

// Convolution on cuDNN (cuda/conv.cc).
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                      const kernels::Conv2dGeometry& geometry, kernels::Activation activation,
                      DType out_dtype);
Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const kernels::Conv2dGeometry& geometry, DType out_dtype);
void conv2d_backward_weights(const Tensor& x, const Tensor& dy,
                             const kernels::Conv2dGeometry& geometry, Tensor& dw, Tensor* db);

// Max, average and global average pooling (cuda/pool.cu); max pooling's
// workspace is i32 indices with y's shape.
kernels::MaxPoolResult max_pool2d_forward(const Tensor& x, const kernels::Pool2dGeometry& geometry,
                                          bool training);
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& workspace, const Shape& x_shape,
                           const kernels::Pool2dGeometry& geometry);
Tensor avg_pool2d(const Tensor& x, const kernels::Pool2dGeometry& geometry);
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape,
                           const kernels::Pool2dGeometry& geometry);
Tensor global_avg_pool(const Tensor& x);
Tensor global_avg_pool_backward(const Tensor& dy, const Shape& x_shape);

// Dropout with the counter-based generator's mask (cuda/dropout.cu): the
// same mask as the CPU for the same (seed, offset).
kernels::DropoutResult dropout(const Tensor& x, float p, uint64_t seed, uint64_t offset);
Tensor dropout_backward(const Tensor& dy, const Tensor& mask, float p);

// The row-wise parts of attention (cuda/attention.cu), documented in
// kernels/detail/attention_rows.h.
void attention_probabilities(const kernels::detail::AttentionRows& rows, int64_t first,
                             Tensor& scores, Tensor& lse, Tensor& probs);
Tensor attention_row_dot(const Tensor& dout, const Tensor& out);
void attention_score_grads(const kernels::detail::AttentionRows& rows, int64_t first, Tensor& probs,
                           Tensor& dprobs, const Tensor& lse, const Tensor& row_dot, Tensor& kept,
                           Tensor& dscores);

// The optimizers' updates (cuda/optimizer.cu).
void sgd_update(const Tensor& w, const Tensor& g, const Tensor& momentum,
                const kernels::SgdUpdate& s);
void adam_update(const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& v,
                 const kernels::AdamUpdate& s);

}  // namespace tandem::cuda
