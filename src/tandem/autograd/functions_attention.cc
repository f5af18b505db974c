// Differentiable fused scaled dot-product attention.
#include "tandem/autograd/functions.h"
#include "tandem/autograd/node.h"
#include "tandem/base/error.h"
#include "tandem/kernels/attention.h"

namespace tandem {

Variable attention(const Variable& q, const Variable& k, const Variable& v,
                   const AttentionOptions& options, Generator* generator) {
  if (options.compute_dtype != DType::f32 && options.compute_dtype != DType::bf16) {
    TANDEM_THROW(InvalidArgument, "attention: compute dtype must be f32 or bf16, got ",
                 dtype_name(options.compute_dtype));
  }
  kernels::AttentionOptions ko{.causal = options.causal, .scale = options.scale};
  if (options.training && options.dropout > 0.0f) {
    if (generator == nullptr)
      TANDEM_THROW(InvalidArgument, "attention dropout in training needs a generator");
    const Shape& s = q.shape();
    if (s.rank() != 4 || k.shape().rank() != 4)
      TANDEM_THROW(ShapeError, "attention needs q, k, v of rank 4 (B, H, T, D), got ",
                   s.to_string(), " and ", k.shape().to_string());
    ko.dropout = options.dropout;
    ko.seed = generator->seed();
    ko.offset = generator->reserve(s[0] * s[1] * s[2] * k.shape()[2]);
  } else if (!(options.dropout >= 0.0f && options.dropout < 1.0f)) {
    TANDEM_THROW(InvalidArgument, "attention dropout must be in [0, 1), got ", options.dropout);
  }
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

}  // namespace tandem
