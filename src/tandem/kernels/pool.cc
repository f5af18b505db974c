#include "tandem/kernels/pool.h"

#include "tandem/kernels/detail/checks.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/onednn.h"

namespace tandem::kernels {
namespace {

using dnnl::memory;

struct PoolForward {
  dnnl::pooling_v2_forward primitive;
  dnnl::pooling_v2_forward::primitive_desc pd;
};

struct PoolDims {
  memory::dims src, dst, kernel, strides, dilation, pad_l, pad_r;
};

PoolDims pool_dims(const Shape& x, const Pool2dGeometry& g) {
  const Shape y = pool2d_output_shape(x, g);
  return {{x[0], x[3], x[1], x[2]},
          {y[0], y[3], y[1], y[2]},
          {g.kernel_h, g.kernel_w},
          {g.stride_h, g.stride_w},
          {0, 0},
          {g.pad_h, g.pad_w},
          {g.pad_h, g.pad_w}};
}

std::string geometry_key(const Pool2dGeometry& g) {
  return tandem::detail::concat("k", g.kernel_h, ",", g.kernel_w, "s", g.stride_h, ",", g.stride_w,
                                "p", g.pad_h, ",", g.pad_w);
}

std::shared_ptr<PoolForward> forward_primitive(const Shape& x, DType dtype, const Pool2dGeometry& g,
                                               bool training) {
  const std::string key = tandem::detail::concat("maxpool_fwd:", dtype_name(dtype), x.to_string(),
                                                 geometry_key(g), training);
  return detail::cached<PoolForward>(key, [&] {
    return detail::guarded("max-pool forward creation", [&] {
      const PoolDims d = pool_dims(x, g);
      const auto dt = detail::to_dnnl(dtype);
      dnnl::pooling_v2_forward::desc desc(
          training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
          dnnl::algorithm::pooling_max, memory::desc(d.src, dt, memory::format_tag::nhwc),
          memory::desc(d.dst, dt, memory::format_tag::nhwc), d.strides, d.kernel, d.dilation,
          d.pad_l, d.pad_r);
      auto p = std::make_shared<PoolForward>();
      p->pd = dnnl::pooling_v2_forward::primitive_desc(desc, detail::user_scratchpad_attr(),
                                                       detail::cpu_engine());
      p->primitive = dnnl::pooling_v2_forward(p->pd);
      return p;
    });
  });
}

}  // namespace

Shape pool2d_output_shape(const Shape& x, const Pool2dGeometry& g) {
  if (x.rank() != 4) {
    TANDEM_THROW(ShapeError, "max_pool2d: expected x (N, H, W, C), got ", x.to_string());
  }
  if (g.kernel_h < 1 || g.kernel_w < 1 || g.stride_h < 1 || g.stride_w < 1 || g.pad_h < 0 ||
      g.pad_w < 0 || g.pad_h >= g.kernel_h || g.pad_w >= g.kernel_w) {
    TANDEM_THROW(InvalidArgument,
                 "max_pool2d: kernel and stride must be >= 1 and padding in "
                 "[0, kernel), got ",
                 geometry_key(g));
  }
  if (x[1] + 2 * g.pad_h < g.kernel_h || x[2] + 2 * g.pad_w < g.kernel_w) {
    TANDEM_THROW(ShapeError, "max_pool2d: window ", g.kernel_h, "x", g.kernel_w,
                 " does not fit input ", x.to_string());
  }
  return Shape{x[0], (x[1] + 2 * g.pad_h - g.kernel_h) / g.stride_h + 1,
               (x[2] + 2 * g.pad_w - g.kernel_w) / g.stride_w + 1, x[3]};
}

MaxPoolResult max_pool2d_forward(const Tensor& x, const Pool2dGeometry& g, bool training) {
  if (!is_floating(x.dtype())) {
    TANDEM_THROW(ShapeError, "max_pool2d: expected f32, bf16 or f16, got ", x.to_string());
  }
  TANDEM_DISPATCH_CUDA(x, max_pool2d_forward(x, g, training));
  if (x.dtype() == DType::f16 || detail::needs_bf16_widening(x)) {
    // oneDNN 2.6 pools f16 only on AVX512-FP16 CPUs, bf16 only from AVX-512
    // (onednn_runs_bf16): pool in f32 (max is exact in either) and narrow;
    // the f32 workspace serves the backward.
    MaxPoolResult wide;
    {
      // (The pooling workspace stays an activation: it is allocated as one.)
      MemoryCategoryScope temporaries(MemoryCategory::workspace);
      wide = max_pool2d_forward(detail::widened(x), g, training);
    }
    wide.y = detail::narrowed(wide.y, x.dtype());
    return wide;
  }
  MaxPoolResult result;
  result.y = Tensor::empty(pool2d_output_shape(x.shape(), g), x.dtype(), x.device());
  if (result.y.numel() == 0) return result;
  auto prim = forward_primitive(x.shape(), x.dtype(), g, training);
  detail::guarded("max-pool forward", [&] {
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, detail::memory_of(x, prim->pd.src_desc())},
        {DNNL_ARG_DST, detail::memory_of(result.y, prim->pd.dst_desc())}};
    if (training) {
      const memory::desc ws = prim->pd.workspace_desc();
      result.workspace = Tensor::empty(Shape{static_cast<int64_t>(ws.get_size())}, DType::u8,
                                       x.device(), MemoryCategory::activations);
      args.emplace(DNNL_ARG_WORKSPACE, detail::memory_of(result.workspace, ws));
    }
    detail::execute(prim->primitive, prim->pd.scratchpad_desc(), std::move(args), x.device());
  });
  return result;
}

Tensor max_pool2d_backward(const Tensor& dy, const Tensor& workspace, const Shape& x_shape,
                           const Pool2dGeometry& g) {
  const Shape y_shape = pool2d_output_shape(x_shape, g);
  if (dy.shape() != y_shape) {
    TANDEM_THROW(ShapeError, "max_pool2d_backward: dy ", dy.shape().to_string(), " should be ",
                 y_shape.to_string());
  }
  detail::check_same_device("max_pool2d_backward", dy, {&workspace});
  TANDEM_DISPATCH_CUDA(dy, max_pool2d_backward(dy, workspace, x_shape, g));
  if (dy.dtype() == DType::f16 || detail::needs_bf16_widening(dy)) {  // see max_pool2d_forward
    Tensor dx;
    {
      MemoryCategoryScope temporaries(MemoryCategory::workspace);
      dx = max_pool2d_backward(detail::widened(dy), workspace, x_shape, g);
    }
    return detail::narrowed(dx, dy.dtype());
  }
  Tensor dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
  if (dx.numel() == 0) return dx;
  if (dy.numel() == 0) {
    dx.zero();
    return dx;
  }
  struct PoolBackward {
    dnnl::pooling_v2_backward primitive;
    dnnl::pooling_v2_backward::primitive_desc pd;
    memory::desc workspace;
  };
  const std::string key = tandem::detail::concat("maxpool_bwd:", dtype_name(dy.dtype()),
                                                 x_shape.to_string(), geometry_key(g));
  auto prim = detail::cached<PoolBackward>(key, [&] {
    return detail::guarded("max-pool backward creation", [&] {
      auto hint = forward_primitive(x_shape, dy.dtype(), g, true);
      const PoolDims d = pool_dims(x_shape, g);
      const auto dt = detail::to_dnnl(dy.dtype());
      dnnl::pooling_v2_backward::desc desc(dnnl::algorithm::pooling_max,
                                           memory::desc(d.src, dt, memory::format_tag::nhwc),
                                           memory::desc(d.dst, dt, memory::format_tag::nhwc),
                                           d.strides, d.kernel, d.dilation, d.pad_l, d.pad_r);
      auto p = std::make_shared<PoolBackward>();
      p->pd = dnnl::pooling_v2_backward::primitive_desc(desc, detail::user_scratchpad_attr(),
                                                        detail::cpu_engine(), hint->pd);
      p->primitive = dnnl::pooling_v2_backward(p->pd);
      p->workspace = hint->pd.workspace_desc();
      return p;
    });
  });
  if (!workspace.defined() || workspace.nbytes() != prim->workspace.get_size()) {
    TANDEM_THROW(ShapeError, "max_pool2d_backward: workspace of ", prim->workspace.get_size(),
                 " bytes from a training-mode forward expected, got ", workspace.to_string());
  }
  detail::guarded("max-pool backward", [&] {
    detail::execute(prim->primitive, prim->pd.scratchpad_desc(),
                    {{DNNL_ARG_DIFF_DST, detail::memory_of(dy, prim->pd.diff_dst_desc())},
                     {DNNL_ARG_WORKSPACE, detail::memory_of(workspace, prim->workspace)},
                     {DNNL_ARG_DIFF_SRC, detail::memory_of(dx, prim->pd.diff_src_desc())}},
                    dy.device());
  });
  return dx;
}

}  // namespace tandem::kernels
