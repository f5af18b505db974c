#include "tandem/kernels/detail/batch_norm.h"

#include "tandem/kernels/detail/onednn.h"

namespace tandem::kernels::detail {
namespace {

using dnnl::memory;
using dnnl::normalization_flags;

// Rows of C channels as oneDNN's (N, C, H, W) with N = W = 1 and H the rows,
// in nhwc: the primitive reduces over N, H and W alike, so any rank maps onto
// it. As one image of R rows rather than R images of one pixel: the kernels
// then stream over the rows (measured on Zen 4, resnet at batch 128, 1 thread:
// bf16 batch norm 31 -> 23 ms per step, f32 and bf16 steps 3-5% faster).
memory::desc data_desc(const Tensor& x) {
  const int64_t C = x.dim(-1);
  return memory::desc({1, C, x.numel() / C, 1}, to_dnnl(x.dtype()), memory::format_tag::nhwc);
}

memory::desc channel_desc(const Tensor& x) {
  return memory::desc({x.dim(-1)}, memory::data_type::f32, memory::format_tag::a);
}

normalization_flags affine() {
  return normalization_flags::use_scale | normalization_flags::use_shift;
}

struct Forward {
  dnnl::batch_normalization_forward primitive;
  dnnl::batch_normalization_forward::primitive_desc pd;
};

struct Backward {
  dnnl::batch_normalization_backward primitive;
  memory::desc scratchpad;
};

normalization_flags training_flags(bool relu) {
  return relu ? affine() | normalization_flags::fuse_norm_relu : affine();
}

std::shared_ptr<Forward> forward_primitive(const Tensor& x, float eps, bool training, bool relu) {
  const std::string key = tandem::detail::concat("bnorm_fwd:", training ? "train:" : "stats:", relu,
                                                 ":", eps, ":", key_of(x));
  return cached<Forward>(key, [&] {
    return guarded("batch norm forward creation", [&] {
      auto p = std::make_shared<Forward>();
      const normalization_flags flags =
          training ? training_flags(relu) : affine() | normalization_flags::use_global_stats;
      dnnl::batch_normalization_forward::desc desc(
          training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
          data_desc(x), eps, flags);
      p->pd = dnnl::batch_normalization_forward::primitive_desc(desc, user_scratchpad_attr(),
                                                                cpu_engine());
      p->primitive = dnnl::batch_normalization_forward(p->pd);
      return p;
    });
  });
}

Tensor channel_tensor(const Tensor& x) {
  return Tensor::empty(Shape{x.dim(-1)}, DType::f32, x.device());
}

}  // namespace

bool batch_norm_supported(const Tensor& x) {
  // On a GPU the split kernels run (kernels/cuda/batch_norm.cu).
  return x.defined() && x.device().kind == DeviceKind::cpu &&
         (x.dtype() == DType::f32 || (x.dtype() == DType::bf16 && onednn_runs_bf16())) &&
         x.rank() >= 1 && x.dim(-1) > 0 && x.numel() > 0;
}

BatchNormForward batch_norm_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     float eps, bool relu) {
  if (batch_norm_rows_apply(x)) return batch_norm_rows_training(x, gamma, beta, eps, relu);
  BatchNormForward r{Tensor::empty(x.shape(), x.dtype(), x.device()), channel_tensor(x),
                     channel_tensor(x), Tensor()};
  auto p = forward_primitive(x, eps, true, relu);
  const memory::desc data = data_desc(x), channel = channel_desc(x);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory_of(x, data)},
                                       {DNNL_ARG_DST, memory_of(r.y, data)},
                                       {DNNL_ARG_SCALE, memory_of(gamma, channel)},
                                       {DNNL_ARG_SHIFT, memory_of(beta, channel)},
                                       {DNNL_ARG_MEAN, memory_of(r.mean, channel)},
                                       {DNNL_ARG_VARIANCE, memory_of(r.variance, channel)}};
  if (relu) {
    const memory::desc workspace = p->pd.workspace_desc();
    r.relu_mask =
        Tensor::empty(Shape{static_cast<int64_t>(workspace.get_size())}, DType::u8, x.device());
    args.emplace(DNNL_ARG_WORKSPACE, memory_of(r.relu_mask, workspace));
  }
  guarded("batch norm forward",
          [&] { execute(p->primitive, p->pd.scratchpad_desc(), std::move(args), x.device()); });
  return r;
}

Tensor batch_norm_with_stats(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             const Tensor& mean, const Tensor& variance, float eps) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  auto p = forward_primitive(x, eps, false, false);
  const memory::desc data = data_desc(x), channel = channel_desc(x);
  guarded("batch norm inference", [&] {
    execute(p->primitive, p->pd.scratchpad_desc(),
            {{DNNL_ARG_SRC, memory_of(x, data)},
             {DNNL_ARG_DST, memory_of(y, data)},
             {DNNL_ARG_SCALE, memory_of(gamma, channel)},
             {DNNL_ARG_SHIFT, memory_of(beta, channel)},
             {DNNL_ARG_MEAN, memory_of(mean, channel)},
             {DNNL_ARG_VARIANCE, memory_of(variance, channel)}},
            x.device());
  });
  return y;
}

NormGrads batch_norm_training_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                       const Tensor& variance, const Tensor& gamma, float eps,
                                       const Tensor& relu_mask) {
  if (batch_norm_rows_apply(x))
    return batch_norm_rows_backward(dy, x, mean, variance, gamma, eps, relu_mask);
  NormGrads g{Tensor::empty(x.shape(), x.dtype(), x.device()), channel_tensor(x),
              channel_tensor(x)};
  const bool relu = relu_mask.defined();
  auto hint = forward_primitive(x, eps, true, relu);
  const std::string key = tandem::detail::concat("bnorm_bwd:", relu, ":", eps, ":", key_of(x));
  auto p = cached<Backward>(key, [&] {
    return guarded("batch norm backward creation", [&] {
      auto b = std::make_shared<Backward>();
      dnnl::batch_normalization_backward::desc desc(dnnl::prop_kind::backward, data_desc(dy),
                                                    data_desc(x), eps, training_flags(relu));
      dnnl::batch_normalization_backward::primitive_desc pd(desc, user_scratchpad_attr(),
                                                            cpu_engine(), hint->pd);
      b->primitive = dnnl::batch_normalization_backward(pd);
      b->scratchpad = pd.scratchpad_desc();
      return b;
    });
  });
  const memory::desc data = data_desc(x), channel = channel_desc(x);
  // oneDNN 2.6 checks that backward is given a shift under use_shift, though
  // the gradients do not depend on it.
  const Tensor unused_shift = Tensor::zeros(Shape{x.dim(-1)}, DType::f32, x.device());
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory_of(x, data)},
                                       {DNNL_ARG_DIFF_DST, memory_of(dy, data)},
                                       {DNNL_ARG_MEAN, memory_of(mean, channel)},
                                       {DNNL_ARG_VARIANCE, memory_of(variance, channel)},
                                       {DNNL_ARG_SCALE, memory_of(gamma, channel)},
                                       {DNNL_ARG_SHIFT, memory_of(unused_shift, channel)},
                                       {DNNL_ARG_DIFF_SRC, memory_of(g.dx, data)},
                                       {DNNL_ARG_DIFF_SCALE, memory_of(g.dgamma, channel)},
                                       {DNNL_ARG_DIFF_SHIFT, memory_of(g.dbeta, channel)}};
  if (relu) {
    const memory::desc workspace = hint->pd.workspace_desc();
    if (relu_mask.dtype() != DType::u8 ||
        relu_mask.shape() != Shape{static_cast<int64_t>(workspace.get_size())}) {
      TANDEM_THROW(ShapeError, "batch_norm_backward: the ReLU mask must be u8 (",
                   workspace.get_size(), ",), oneDNN's workspace for x ", x.shape().to_string(),
                   " (from batch_norm_train), got ", relu_mask.to_string());
    }
    args.emplace(DNNL_ARG_WORKSPACE, memory_of(relu_mask, workspace));
  }
  guarded("batch norm backward",
          [&] { execute(p->primitive, p->scratchpad, std::move(args), x.device()); });
  return g;
}

}  // namespace tandem::kernels::detail
