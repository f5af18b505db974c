#include "tandem/kernels/conv.h"

#include "tandem/kernels/detail/bf16_conv_weights.h"
#include "tandem/kernels/detail/checks.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/gelu_avx512.h"
#include "tandem/kernels/detail/narrow_conv.h"
#include "tandem/kernels/detail/onednn.h"
#include "tandem/kernels/flops.h"

namespace tandem::kernels {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

struct ConvShapes {
  memory::dims src, weights, bias, dst, strides, dilates, pad_l, pad_r;
};

ConvShapes conv_shapes(const Shape& x, const Shape& w, const Conv2dGeometry& g) {
  const Shape y = conv2d_output_shape(x, w, g);
  ConvShapes s;
  // oneDNN's logical order is (N, C, H, W) and (O, I, KH, KW) whatever the layout.
  s.src = {x[0], x[3], x[1], x[2]};
  s.weights = {w[3], w[2], w[0], w[1]};
  s.bias = {w[3]};
  s.dst = {y[0], y[3], y[1], y[2]};
  s.strides = {g.stride_h, g.stride_w};
  s.dilates = {g.dilation_h - 1, g.dilation_w - 1};  // oneDNN counts extra gaps
  s.pad_l = {g.pad_h, g.pad_w};
  s.pad_r = {g.pad_h, g.pad_w};
  return s;
}

std::string geometry_key(const Conv2dGeometry& g) {
  return tandem::detail::concat("s", g.stride_h, ",", g.stride_w, "p", g.pad_h, ",", g.pad_w, "d",
                                g.dilation_h, ",", g.dilation_w);
}

memory::desc nhwc(const memory::dims& dims, DType dtype) {
  return memory::desc(dims, detail::to_dnnl(dtype), tag::nhwc);
}

memory::desc hwio(const memory::dims& dims, DType dtype) {
  return memory::desc(dims, detail::to_dnnl(dtype), tag::hwio);
}

void check_float_pair(const Tensor& a, const Tensor& b, const char* op) {
  if (a.dtype() != b.dtype() || (a.dtype() != DType::f32 && a.dtype() != DType::bf16)) {
    TANDEM_THROW(ShapeError, op, ": operands must both be f32 or both bf16, got ", a.to_string(),
                 " and ", b.to_string());
  }
}

// A reorder between a user layout and the layout a primitive chose, built
// with the primitive (empty when the layouts match).
struct LayoutReorder {
  memory::desc user, chosen;
  dnnl::reorder primitive;
  bool needed = false;

  void init(const memory::desc& user_desc, const memory::desc& chosen_desc, bool user_to_chosen) {
    user = user_desc;
    chosen = chosen_desc;
    needed = !(user == chosen);
    if (!needed) return;
    const auto& from = user_to_chosen ? user : chosen;
    const auto& to = user_to_chosen ? chosen : user;
    primitive = dnnl::reorder(
        dnnl::reorder::primitive_desc(detail::cpu_engine(), from, detail::cpu_engine(), to));
  }
};

// The weights as a memory in the primitive's layout; `holder` keeps a
// reordered copy alive.
memory weights_for(const LayoutReorder& r, const Tensor& w, Tensor& holder) {
  if (!r.needed) return detail::memory_of(w, r.user);
  holder = Tensor::empty(Shape{static_cast<int64_t>(r.chosen.get_size())}, DType::u8, w.device(),
                         MemoryCategory::workspace);
  memory chosen = detail::memory_of(holder, r.chosen);
  detail::execute(r.primitive, memory::desc(),
                  {{DNNL_ARG_FROM, detail::memory_of(w, r.user)}, {DNNL_ARG_TO, chosen}},
                  w.device());
  return chosen;
}

struct ConvForward {
  dnnl::convolution_forward primitive;
  dnnl::convolution_forward::primitive_desc pd;
  LayoutReorder weights;
};

std::shared_ptr<ConvForward> forward_primitive(const Shape& x, const Shape& w, DType in_dtype,
                                               bool has_bias, const Conv2dGeometry& g,
                                               Activation activation, DType out_dtype,
                                               dnnl::prop_kind prop) {
  const std::string key = tandem::detail::concat(
      "conv_fwd:", dtype_name(in_dtype), x.to_string(), w.to_string(), has_bias, geometry_key(g),
      static_cast<int>(activation), dtype_name(out_dtype), static_cast<int>(prop));
  return detail::cached<ConvForward>(key, [&] {
    return detail::guarded("convolution forward creation", [&] {
      const ConvShapes s = conv_shapes(x, w, g);
      auto p = std::make_shared<ConvForward>();
      const memory::desc weights_any(s.weights, detail::to_dnnl(in_dtype), tag::any);
      const memory::desc bias_desc =
          has_bias ? memory::desc(s.bias, memory::data_type::f32, tag::x) : memory::desc();
      dnnl::convolution_forward::desc desc(
          prop, dnnl::algorithm::convolution_direct, nhwc(s.src, in_dtype), weights_any, bias_desc,
          nhwc(s.dst, out_dtype), s.strides, s.dilates, s.pad_l, s.pad_r);
      dnnl::primitive_attr attr = detail::user_scratchpad_attr();
      if (activation != Activation::none) attr.set_post_ops(detail::activation_post_op(activation));
      p->pd = dnnl::convolution_forward::primitive_desc(desc, attr, detail::cpu_engine());
      p->primitive = dnnl::convolution_forward(p->pd);
      p->weights.init(hwio(s.weights, in_dtype), p->pd.weights_desc(), true);
      return p;
    });
  });
}

void check_bias(const Tensor& bias, const Tensor& w) {
  if (bias.defined() && (bias.numel() != w.dim(3) || bias.dtype() != DType::f32)) {
    TANDEM_THROW(ShapeError, "conv2d: bias must be f32 with ", w.dim(3), " elements, got ",
                 bias.to_string());
  }
}

void check_weight_gradients(const Tensor& dw, const Tensor* db, const char* op) {
  if (dw.dtype() != DType::f32 || dw.rank() != 4 ||
      (db != nullptr && (db->dtype() != DType::f32 || db->numel() != dw.dim(3)))) {
    TANDEM_THROW(ShapeError, op, ": dw (KH, KW, C, O) and db (O,) must be f32, got ",
                 dw.to_string(), db ? " and " + db->to_string() : std::string());
  }
}

// Multiply-adds x 2 of one pass: every output element (N, OH, OW, O) sums
// KH x KW x C products; the backward passes do the same work.
int64_t conv_flops(const Shape& x, const Shape& w, const Shape& y) {
  return 2 * y[0] * y[1] * y[2] * y[3] * w[0] * w[1] * x[3];
}

}  // namespace

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dGeometry& g) {
  if (x.rank() != 4 || w.rank() != 4) {
    TANDEM_THROW(ShapeError, "conv2d: expected x (N, H, W, C) and weights (KH, KW, C, O), got ",
                 x.to_string(), " and ", w.to_string());
  }
  if (x[3] != w[2]) {
    TANDEM_THROW(ShapeError, "conv2d: input has ", x[3], " channels but weights ", w.to_string(),
                 " expect ", w[2]);
  }
  if (g.stride_h < 1 || g.stride_w < 1 || g.dilation_h < 1 || g.dilation_w < 1 || g.pad_h < 0 ||
      g.pad_w < 0) {
    TANDEM_THROW(InvalidArgument, "conv2d: strides and dilations must be >= 1 and padding >= 0");
  }
  const int64_t span_h = g.dilation_h * (w[0] - 1) + 1;
  const int64_t span_w = g.dilation_w * (w[1] - 1) + 1;
  const int64_t oh = (x[1] + 2 * g.pad_h - span_h) / g.stride_h + 1;
  const int64_t ow = (x[2] + 2 * g.pad_w - span_w) / g.stride_w + 1;
  if (w[0] < 1 || w[1] < 1 || x[1] + 2 * g.pad_h < span_h || x[2] + 2 * g.pad_w < span_w) {
    TANDEM_THROW(ShapeError, "conv2d: kernel ", w[0], "x", w[1], " does not fit input ",
                 x.to_string(), " with padding ", g.pad_h, ",", g.pad_w);
  }
  return Shape{x[0], oh, ow, w[3]};
}

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dGeometry& g,
                      Activation activation, DType out_dtype) {
  check_float_pair(x, w, "conv2d_forward");
  const Shape y_shape = conv2d_output_shape(x.shape(), w.shape(), g);
  check_bias(bias, w);
  detail::check_same_device("conv2d_forward", x, {&w, &bias});
  TANDEM_DISPATCH_CUDA(x, conv2d_forward(x, w, bias, g, activation, out_dtype));
  if (detail::narrow_conv_applies(x.shape(), activation) &&
      (out_dtype == DType::f32 || out_dtype == DType::bf16)) {
    Tensor y = Tensor::empty(y_shape, out_dtype, x.device());
    if (y.numel() != 0) detail::narrow_conv_forward(x, w, bias, g, activation, y);
    count_flops(conv_flops(x.shape(), w.shape(), y_shape));
    return y;
  }
  // GELU as the separate op computes it (see gelu_follows_product).
  if (detail::gelu_follows_product(activation, x.dtype(), out_dtype, x.device())) {
    Tensor y = conv2d_forward(x, w, bias, g, Activation::none, out_dtype);
    detail::gelu_in_place(activation, y);
    return y;
  }
  if (detail::needs_bf16_widening(x)) {  // see onednn_runs_bf16
    Tensor y;
    {
      MemoryCategoryScope temporaries(MemoryCategory::workspace);
      y = conv2d_forward(detail::widened(x), detail::widened(w), bias, g, activation);
    }
    return detail::narrowed(y, out_dtype);
  }
  Tensor y = Tensor::empty(y_shape, out_dtype, x.device());
  if (y.numel() == 0) return y;
  auto prim = forward_primitive(x.shape(), w.shape(), x.dtype(), bias.defined(), g, activation,
                                out_dtype, dnnl::prop_kind::forward_training);
  detail::guarded("convolution forward", [&] {
    Tensor holder;
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, detail::memory_of(x, prim->pd.src_desc())},
                                         {DNNL_ARG_WEIGHTS, weights_for(prim->weights, w, holder)},
                                         {DNNL_ARG_DST, detail::memory_of(y, prim->pd.dst_desc())}};
    if (bias.defined()) args.emplace(DNNL_ARG_BIAS, detail::memory_of(bias, prim->pd.bias_desc()));
    detail::execute(prim->primitive, prim->pd.scratchpad_desc(), std::move(args), x.device());
  });
  count_flops(conv_flops(x.shape(), w.shape(), y_shape));
  return y;
}

Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv2dGeometry& g, DType out_dtype) {
  check_float_pair(dy, w, "conv2d_backward_data");
  const Shape y_shape = conv2d_output_shape(x_shape, w.shape(), g);
  if (dy.shape() != y_shape) {
    TANDEM_THROW(ShapeError, "conv2d_backward_data: dy ", dy.shape().to_string(), " should be ",
                 y_shape.to_string());
  }
  detail::check_same_device("conv2d_backward_data", dy, {&w});
  TANDEM_DISPATCH_CUDA(dy, conv2d_backward_data(dy, w, x_shape, g, out_dtype));
  if (detail::needs_bf16_widening(dy)) {  // see onednn_runs_bf16
    Tensor dx;
    {
      MemoryCategoryScope temporaries(MemoryCategory::workspace);
      dx = conv2d_backward_data(detail::widened(dy), detail::widened(w), x_shape, g);
    }
    return detail::narrowed(dx, out_dtype);
  }
  Tensor dx = Tensor::empty(x_shape, out_dtype, dy.device());
  if (dx.numel() == 0) return dx;
  if (dy.numel() == 0) {
    dx.zero();
    return dx;
  }
  struct ConvBackwardData {
    dnnl::convolution_backward_data primitive;
    dnnl::convolution_backward_data::primitive_desc pd;
    LayoutReorder weights;
  };
  const std::string key =
      tandem::detail::concat("conv_bwd_data:", detail::key_of(dy), x_shape.to_string(),
                             w.shape().to_string(), geometry_key(g), dtype_name(out_dtype));
  auto prim = detail::cached<ConvBackwardData>(key, [&] {
    return detail::guarded("convolution backward-data creation", [&] {
      const ConvShapes s = conv_shapes(x_shape, w.shape(), g);
      auto hint = forward_primitive(x_shape, w.shape(), dy.dtype(), false, g, Activation::none,
                                    dy.dtype(), dnnl::prop_kind::forward_training);
      auto p = std::make_shared<ConvBackwardData>();
      const memory::desc weights_any(s.weights, detail::to_dnnl(w.dtype()), tag::any);
      dnnl::convolution_backward_data::desc desc(
          dnnl::algorithm::convolution_direct, nhwc(s.src, out_dtype), weights_any,
          nhwc(s.dst, dy.dtype()), s.strides, s.dilates, s.pad_l, s.pad_r);
      p->pd = dnnl::convolution_backward_data::primitive_desc(desc, detail::user_scratchpad_attr(),
                                                              detail::cpu_engine(), hint->pd);
      p->primitive = dnnl::convolution_backward_data(p->pd);
      p->weights.init(hwio(s.weights, w.dtype()), p->pd.weights_desc(), true);
      return p;
    });
  });
  detail::guarded("convolution backward data", [&] {
    Tensor holder;
    detail::execute(prim->primitive, prim->pd.scratchpad_desc(),
                    {{DNNL_ARG_DIFF_DST, detail::memory_of(dy, prim->pd.diff_dst_desc())},
                     {DNNL_ARG_WEIGHTS, weights_for(prim->weights, w, holder)},
                     {DNNL_ARG_DIFF_SRC, detail::memory_of(dx, prim->pd.diff_src_desc())}},
                    dy.device());
  });
  count_flops(conv_flops(x_shape, w.shape(), y_shape));
  return dx;
}

void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Conv2dGeometry& g, Tensor& dw,
                             Tensor* db) {
  check_float_pair(x, dy, "conv2d_backward_weights");
  const Shape y_shape = conv2d_output_shape(x.shape(), dw.shape(), g);
  if (dy.shape() != y_shape) {
    TANDEM_THROW(ShapeError, "conv2d_backward_weights: dy ", dy.shape().to_string(), " should be ",
                 y_shape.to_string());
  }
  check_weight_gradients(dw, db, "conv2d_backward_weights");
  detail::check_same_device("conv2d_backward_weights", x, {&dy, &dw});
  if (db != nullptr) detail::check_same_device("conv2d_backward_weights", x, {db});
  TANDEM_DISPATCH_CUDA(x, conv2d_backward_weights(x, dy, g, dw, db));
  if (detail::narrow_conv_applies(x.shape(), Activation::none)) {
    detail::narrow_conv_backward_weights(x, dy, g, dw, db);
    count_flops(conv_flops(x.shape(), dw.shape(), y_shape));
    return;
  }
  if (detail::bf16_conv_weights_applies(x, dy, dw.shape(), g)) {
    detail::bf16_conv_backward_weights(x, dy, g, dw, db, *detail::fastest_bf16_engine());
    count_flops(conv_flops(x.shape(), dw.shape(), y_shape));
    return;
  }
  if (detail::needs_bf16_widening(x)) {  // see onednn_runs_bf16
    MemoryCategoryScope temporaries(MemoryCategory::workspace);
    conv2d_backward_weights(detail::widened(x), detail::widened(dy), g, dw, db);
    return;
  }
  if (dy.numel() == 0 || x.numel() == 0) {
    dw.zero();
    if (db != nullptr) db->zero();
    return;
  }
  struct ConvBackwardWeights {
    dnnl::convolution_backward_weights primitive;
    dnnl::convolution_backward_weights::primitive_desc pd;
    LayoutReorder weights;  // chosen -> user
  };
  const bool has_bias = db != nullptr;
  const std::string key =
      tandem::detail::concat("conv_bwd_weights:", detail::key_of(x), detail::key_of(dy),
                             dw.shape().to_string(), has_bias, geometry_key(g));
  auto prim = detail::cached<ConvBackwardWeights>(key, [&] {
    return detail::guarded("convolution backward-weights creation", [&] {
      const ConvShapes s = conv_shapes(x.shape(), dw.shape(), g);
      auto hint = forward_primitive(x.shape(), dw.shape(), x.dtype(), has_bias, g, Activation::none,
                                    dy.dtype(), dnnl::prop_kind::forward_training);
      auto p = std::make_shared<ConvBackwardWeights>();
      const memory::desc weights_any(s.weights, memory::data_type::f32, tag::any);
      const memory::desc bias_desc =
          has_bias ? memory::desc(s.bias, memory::data_type::f32, tag::x) : memory::desc();
      dnnl::convolution_backward_weights::desc desc(
          dnnl::algorithm::convolution_direct, nhwc(s.src, x.dtype()), weights_any, bias_desc,
          nhwc(s.dst, dy.dtype()), s.strides, s.dilates, s.pad_l, s.pad_r);
      p->pd = dnnl::convolution_backward_weights::primitive_desc(
          desc, detail::user_scratchpad_attr(), detail::cpu_engine(), hint->pd);
      p->primitive = dnnl::convolution_backward_weights(p->pd);
      p->weights.init(hwio(s.weights, DType::f32), p->pd.diff_weights_desc(), false);
      return p;
    });
  });
  detail::guarded("convolution backward weights", [&] {
    const LayoutReorder& r = prim->weights;
    Tensor staging = !r.needed ? dw
                               : Tensor::empty(Shape{static_cast<int64_t>(r.chosen.get_size())},
                                               DType::u8, x.device(), MemoryCategory::workspace);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, detail::memory_of(x, prim->pd.src_desc())},
        {DNNL_ARG_DIFF_DST, detail::memory_of(dy, prim->pd.diff_dst_desc())},
        {DNNL_ARG_DIFF_WEIGHTS, detail::memory_of(staging, r.chosen)}};
    if (has_bias)
      args.emplace(DNNL_ARG_DIFF_BIAS, detail::memory_of(*db, prim->pd.diff_bias_desc()));
    detail::execute(prim->primitive, prim->pd.scratchpad_desc(), std::move(args), x.device());
    if (r.needed) {
      detail::execute(r.primitive, memory::desc(),
                      {{DNNL_ARG_FROM, detail::memory_of(staging, r.chosen)},
                       {DNNL_ARG_TO, detail::memory_of(dw, r.user)}},
                      x.device());
    }
  });
  count_flops(conv_flops(x.shape(), dw.shape(), y_shape));
}

bool conv2d_max_pool_fuses(const Shape& x, DType x_dtype, DeviceKind device,
                           const Pool2dGeometry& pool, DType out_dtype) {
  const auto float_storage = [](DType d) { return d == DType::f32 || d == DType::bf16; };
  return device == DeviceKind::cpu && float_storage(x_dtype) && float_storage(out_dtype) &&
         detail::narrow_conv_applies(x, Activation::none) && pool.stride_h == pool.kernel_h &&
         pool.stride_w == pool.kernel_w && pool.pad_h == 0 && pool.pad_w == 0 &&
         pool.kernel_h * pool.kernel_w < 256;
}

namespace {

// The pooled output's shape, after the checks both passes share.
Shape conv_pool_shape(const char* op, const Tensor& x, const Shape& w, const Conv2dGeometry& g,
                      const Pool2dGeometry& pool, DType out_dtype) {
  if (!conv2d_max_pool_fuses(x, pool, out_dtype)) {
    TANDEM_THROW(InvalidArgument, op, ": takes (N, H, W, C) f32 or bf16 inputs of up to ",
                 detail::kNarrowChannels,
                 " channels on the CPU and pooling windows that do not overlap (stride == kernel, "
                 "no padding), got ",
                 x.to_string(), " to ", dtype_name(out_dtype), " with windows ", pool.kernel_h, "x",
                 pool.kernel_w, " stride ", pool.stride_h, "x", pool.stride_w, " padding ",
                 pool.pad_h, "x", pool.pad_w, " (compose conv2d_forward and max_pool2d_forward)");
  }
  return pool2d_output_shape(conv2d_output_shape(x.shape(), w, g), pool);
}

// The flops of the convolution rows a pooled pass computes (every column,
// the rows under whole windows).
int64_t conv_pool_flops(const Shape& x, const Shape& w, const Shape& pooled,
                        const Pool2dGeometry& pool, const Conv2dGeometry& g) {
  const Shape conv = conv2d_output_shape(x, w, g);
  return conv_flops(x, w, Shape{conv[0], pooled[1] * pool.kernel_h, conv[2], conv[3]});
}

}  // namespace

MaxPoolResult conv2d_max_pool_relu_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                                           const Conv2dGeometry& g, const Pool2dGeometry& pool,
                                           DType out_dtype, bool training) {
  check_float_pair(x, w, "conv2d_max_pool_relu_forward");
  check_bias(bias, w);
  detail::check_same_device("conv2d_max_pool_relu_forward", x, {&w, &bias});
  const Shape y_shape =
      conv_pool_shape("conv2d_max_pool_relu_forward", x, w.shape(), g, pool, out_dtype);
  MaxPoolResult r;
  r.y = Tensor::empty(y_shape, out_dtype, x.device());
  if (training)
    r.workspace = Tensor::empty(y_shape, DType::u8, x.device(), MemoryCategory::activations);
  if (r.y.numel() == 0) return r;
  detail::narrow_conv_pool_forward(x, w, bias, g, pool, r.y, training ? &r.workspace : nullptr);
  count_flops(conv_pool_flops(x.shape(), w.shape(), y_shape, pool, g));
  return r;
}

void conv2d_max_pool_backward_weights(const Tensor& x, const Tensor& dy, const Tensor& workspace,
                                      const Conv2dGeometry& g, const Pool2dGeometry& pool,
                                      Tensor& dw, Tensor* db) {
  check_float_pair(x, dy, "conv2d_max_pool_backward_weights");
  check_weight_gradients(dw, db, "conv2d_max_pool_backward_weights");
  detail::check_same_device("conv2d_max_pool_backward_weights", x, {&dy, &workspace, &dw});
  if (db != nullptr) detail::check_same_device("conv2d_max_pool_backward_weights", x, {db});
  const Shape y_shape =
      conv_pool_shape("conv2d_max_pool_backward_weights", x, dw.shape(), g, pool, dy.dtype());
  if (dy.shape() != y_shape || !workspace.defined() || workspace.dtype() != DType::u8 ||
      workspace.shape() != y_shape) {
    TANDEM_THROW(ShapeError, "conv2d_max_pool_backward_weights: dy and the forward's u8 workspace ",
                 "should both be ", y_shape.to_string(), ", got ", dy.to_string(), " and ",
                 workspace.to_string());
  }
  if (dy.numel() == 0) {  // no gradient; x without channels still has db's
    dw.zero();
    if (db != nullptr) db->zero();
    return;
  }
  detail::narrow_conv_pool_backward_weights(x, dy, workspace, g, pool, dw, db);
  count_flops(conv_pool_flops(x.shape(), dw.shape(), y_shape, pool, g));
}

}  // namespace tandem::kernels
