// Activations on oneDNN's vectorised eltwise primitives (f32 and bf16): the
// per-element libm calls of the generic path (tanhf, erff, expf) cost more
// than the matmuls around them in a Transformer's MLP.
#include "tandem/kernels/detail/eltwise.h"

#include "tandem/kernels/detail/onednn.h"

namespace tandem::kernels::detail {
namespace {

using dnnl::memory;

struct EltwiseAlgorithm {
  dnnl::algorithm algorithm;
  float alpha;
};

EltwiseAlgorithm algorithm_of(Activation activation) {
  switch (activation) {
    case Activation::relu:
      return {dnnl::algorithm::eltwise_relu, 0.0f};
    case Activation::gelu:
      return {dnnl::algorithm::eltwise_gelu_erf, 0.0f};
    case Activation::gelu_tanh:
      return {dnnl::algorithm::eltwise_gelu_tanh, 0.0f};
    case Activation::silu:
      return {dnnl::algorithm::eltwise_swish, 1.0f};
    case Activation::none:
      break;
  }
  TANDEM_THROW(InvalidArgument, "no eltwise primitive for activation none");
}

// One flat dimension: the primitive does not care about the shape.
memory::desc flat(const Tensor& t) {
  return memory::desc({t.numel()}, to_dnnl(t.dtype()), memory::format_tag::a);
}

struct Forward {
  dnnl::eltwise_forward primitive;
  dnnl::eltwise_forward::primitive_desc pd;
};

struct Backward {
  dnnl::eltwise_backward primitive;
  memory::desc scratchpad;
};

std::shared_ptr<Forward> forward_primitive(Activation activation, const Tensor& x) {
  const EltwiseAlgorithm a = algorithm_of(activation);
  const std::string key =
      tandem::detail::concat("eltwise_fwd:", static_cast<int>(activation), ":", key_of(x));
  return cached<Forward>(key, [&] {
    return guarded("eltwise forward creation", [&] {
      auto p = std::make_shared<Forward>();
      dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_training, a.algorithm, flat(x),
                                       a.alpha, 0.0f);
      p->pd = dnnl::eltwise_forward::primitive_desc(desc, user_scratchpad_attr(), cpu_engine());
      p->primitive = dnnl::eltwise_forward(p->pd);
      return p;
    });
  });
}

}  // namespace

bool eltwise_supported(const Tensor& x) {
  return x.dtype() == DType::f32 || (x.dtype() == DType::bf16 && onednn_runs_bf16());
}

Tensor eltwise_forward(Activation activation, const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return y;
  auto p = forward_primitive(activation, x);
  guarded("eltwise forward", [&] {
    execute(p->primitive, p->pd.scratchpad_desc(),
            {{DNNL_ARG_SRC, memory_of(x, flat(x))}, {DNNL_ARG_DST, memory_of(y, flat(y))}},
            x.device());
  });
  return y;
}

Tensor eltwise_backward(Activation activation, const Tensor& dy, const Tensor& x) {
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return dx;
  const EltwiseAlgorithm a = algorithm_of(activation);
  auto hint = forward_primitive(activation, x);
  const std::string key =
      tandem::detail::concat("eltwise_bwd:", static_cast<int>(activation), ":", key_of(x));
  auto p = cached<Backward>(key, [&] {
    return guarded("eltwise backward creation", [&] {
      auto b = std::make_shared<Backward>();
      dnnl::eltwise_backward::desc desc(a.algorithm, flat(dy), flat(x), a.alpha, 0.0f);
      dnnl::eltwise_backward::primitive_desc pd(desc, user_scratchpad_attr(), cpu_engine(),
                                                hint->pd);
      b->primitive = dnnl::eltwise_backward(pd);
      b->scratchpad = pd.scratchpad_desc();
      return b;
    });
  });
  guarded("eltwise backward", [&] {
    execute(p->primitive, p->scratchpad,
            {{DNNL_ARG_SRC, memory_of(x, flat(x))},
             {DNNL_ARG_DIFF_DST, memory_of(dy, flat(dy))},
             {DNNL_ARG_DIFF_SRC, memory_of(dx, flat(dx))}},
            x.device());
  });
  return dx;
}

}  // namespace tandem::kernels::detail
