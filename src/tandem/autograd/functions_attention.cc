// Differentiable fused scaled dot-product attention.
#include <vector>

#include "tandem/autograd/functions.h"
#include "tandem/autograd/node.h"
#include "tandem/base/error.h"
#include "tandem/kernels/attention.h"

namespace tandem {

namespace {

// The kernel's options: dropout's seed and the B*H*T*S positions it draws
// from the generator, in training only.
kernels::AttentionOptions kernel_options(const AttentionOptions& options, const Shape& q,
                                         const Shape& k, Generator* generator) {
  if (options.compute_dtype != DType::f32 && options.compute_dtype != DType::bf16) {
    TANDEM_THROW(InvalidArgument, "attention: compute dtype must be f32 or bf16, got ",
                 dtype_name(options.compute_dtype));
  }
  kernels::AttentionOptions ko{.causal = options.causal, .scale = options.scale};
  if (options.training && options.dropout > 0.0f) {
    if (generator == nullptr)
      TANDEM_THROW(InvalidArgument, "attention dropout in training needs a generator");
    if (q.rank() != 4 || k.rank() != 4)
      TANDEM_THROW(ShapeError, "attention needs q, k, v of rank 4 (B, H, T, D), got ",
                   q.to_string(), " and ", k.to_string());
    ko.dropout = options.dropout;
    ko.seed = generator->seed();
    ko.offset = generator->reserve(q[0] * q[1] * q[2] * k[2]);
  } else if (!(options.dropout >= 0.0f && options.dropout < 1.0f)) {
    TANDEM_THROW(InvalidArgument, "attention dropout must be in [0, 1), got ", options.dropout);
  }
  return ko;
}

}  // namespace

Variable attention(const Variable& q, const Variable& k, const Variable& v,
                   const AttentionOptions& options, Generator* generator) {
  const kernels::AttentionOptions ko = kernel_options(options, q.shape(), k.shape(), generator);
  const DType out_dtype = q.dtype();
  const Variable qc = cast(q, options.compute_dtype), kc = cast(k, options.compute_dtype),
                 vc = cast(v, options.compute_dtype);
  const Tensor qv = qc.value(), kv = kc.value(), vv = vc.value();
  kernels::AttentionResult r = kernels::attention(qv, kv, vv, ko);
  Variable out = record_op("attention", r.out, {&qc, &kc, &vc},
                           [qv, kv, vv, o = r.out, lse = r.lse, ko](BackwardContext& ctx) {
                             kernels::AttentionGrads g = kernels::attention_backward(
                                 ctx.grad_output(), qv, kv, vv, o, lse, ko);
                             if (ctx.needs(0)) ctx.set(0, g.dq);
                             if (ctx.needs(1)) ctx.set(1, g.dk);
                             if (ctx.needs(2)) ctx.set(2, g.dv);
                           });
  return cast(out, out_dtype);
}

Variable attention_packed(const Variable& qkv, const AttentionOptions& options,
                          Generator* generator) {
  const Shape& s = qkv.shape();
  if (s.rank() != 5 || s[0] != 3) {
    TANDEM_THROW(ShapeError, "attention_packed needs qkv of shape (3, B, H, T, D), got ",
                 s.to_string());
  }
  const Shape heads{s[1], s[2], s[3], s[4]};
  const kernels::AttentionOptions ko = kernel_options(options, heads, heads, generator);
  const DType out_dtype = qkv.dtype();
  const Variable packed = cast(qkv, options.compute_dtype);
  const Tensor all = packed.value();
  // Thirds of the first axis are contiguous: views, not copies.
  const Tensor q = all.slice(0, 1).reshape(heads), k = all.slice(1, 2).reshape(heads),
               v = all.slice(2, 3).reshape(heads);
  kernels::AttentionResult r = kernels::attention(q, k, v, ko);
  Variable out = record_op(
      "attention", r.out, {&packed}, [q, k, v, o = r.out, lse = r.lse, ko](BackwardContext& ctx) {
        // The three gradients written into thirds of one packed tensor.
        const Shape packed_shape{3, q.dim(0), q.dim(1), q.dim(2), q.dim(3)};
        Tensor grad = Tensor::empty(packed_shape, q.dtype(), q.device());
        kernels::AttentionGrads g{grad.slice(0, 1).reshape(q.shape()),
                                  grad.slice(1, 2).reshape(q.shape()),
                                  grad.slice(2, 3).reshape(q.shape())};
        kernels::attention_backward_into(ctx.grad_output(), q, k, v, o, lse, ko, g);
        ctx.set(0, grad);
      });
  return cast(out, out_dtype);
}

Variable attention_interleaved(const Variable& qkv, const AttentionOptions& options,
                               Generator* generator) {
  const Shape& s = qkv.shape();
  if (s.rank() != 5 || s[2] != 3) {
    TANDEM_THROW(ShapeError, "attention_interleaved needs qkv of shape (B, T, 3, H, D), got ",
                 s.to_string());
  }
  const Shape heads{s[0], s[3], s[1], s[4]};  // (B, H, T, D), for the dropout positions
  const kernels::AttentionOptions ko = kernel_options(options, heads, heads, generator);
  const DType out_dtype = qkv.dtype();
  const Variable interleaved = cast(qkv, options.compute_dtype);
  const Tensor all = interleaved.value();
  kernels::AttentionResult r = kernels::attention_interleaved(all, ko);
  Variable out = record_op(
      "attention", r.out, {&interleaved}, [all, o = r.out, lse = r.lse, ko](BackwardContext& ctx) {
        ctx.set(0, kernels::attention_interleaved_backward(ctx.grad_output(), all, o, lse, ko));
      });
  return cast(out, out_dtype);
}

}  // namespace tandem
