// Differentiable matmul, linear, conv2d and max-pool: the oneDNN-backed ops.
#include <vector>

#include "tandem/autograd/functions.h"
#include "tandem/autograd/node.h"
#include "tandem/base/error.h"
#include "tandem/kernels/conv.h"
#include "tandem/kernels/matmul.h"
#include "tandem/kernels/reduce.h"

namespace tandem {
namespace {

using kernels::Activation;

// The backward of every activation but relu needs its input, which a fused
// epilogue never materialises, so those are only fused when no gradient will
// be taken.
bool fuse(Activation activation, bool recording) {
  return activation == Activation::relu || (activation != Activation::none && !recording);
}

// The output a layer's backward keeps: a fused activation's backward needs
// it; without one, keeping it would only hold activation memory.
Tensor kept_output(const Tensor& y, Activation fused_activation) {
  return fused_activation == Activation::none ? Tensor() : y;
}

// The result dtype of a layer: asked for, or the input's, but f32 for an
// integer input (u8 pixels, as Keras casts them: results in the input's u8
// were clamped at 0 and truncated).
DType output_dtype(const std::optional<DType>& asked, DType input) {
  return asked.value_or(is_floating(input) ? input : DType::f32);
}

// oneDNN writes f32 or bf16 results here; others (f16) are converted after.
DType matmul_output(DType wanted) {
  return wanted == DType::bf16 ? DType::bf16 : DType::f32;
}

void check_compute_dtype(DType dtype, const char* op) {
  if (dtype != DType::f32 && dtype != DType::bf16) {
    TANDEM_THROW(InvalidArgument, op, ": compute dtype must be f32 or bf16, got ",
                 dtype_name(dtype));
  }
}

// A convolution's weight and bias gradients (inputs 1 and 2) from
// compute(dw, db), which writes them in f32 (db null when the bias needs
// none): straight into the gradient buffers when they are f32 and this is
// their first contribution.
template <typename Compute>
void set_conv_weight_gradients(BackwardContext& ctx, const Tensor& weight, DType w_dtype,
                               DType b_dtype, Compute&& compute) {
  if (!ctx.needs(1) && !ctx.needs(2)) return;
  Tensor dw = w_dtype == DType::f32 ? ctx.destination(1) : Tensor();
  if (!dw.defined())
    dw = Tensor::empty(weight.shape(), DType::f32, weight.device(), MemoryCategory::gradients);
  Tensor db = ctx.destination(2);
  if (!db.defined() || db.dtype() != DType::f32)
    db =
        Tensor::empty(Shape{weight.dim(3)}, DType::f32, weight.device(), MemoryCategory::gradients);
  compute(dw, ctx.needs(2) ? &db : nullptr);
  if (ctx.needs(1)) ctx.set(1, dw.to(w_dtype));
  if (ctx.needs(2)) ctx.set(2, db.to(b_dtype));
}

}  // namespace

Variable matmul(const Variable& a, const Variable& b, bool transpose_a, bool transpose_b) {
  const Tensor av = a.value(), bv = b.value();
  Tensor out = kernels::matmul(
      av, bv, {},
      {.transpose_a = transpose_a, .transpose_b = transpose_b, .out_dtype = av.dtype()});
  return record_op(
      "matmul", out, {&a, &b}, [av, bv, transpose_a, transpose_b](BackwardContext& ctx) {
        const Tensor& g = ctx.grad_output();  // (M, N)
        if (ctx.needs(0)) {
          // dA = g . op(B)^T, stored transposed when A was.
          Tensor da =
              transpose_a
                  ? kernels::matmul(
                        bv, g, {},
                        {.transpose_a = transpose_b, .transpose_b = true, .out_dtype = av.dtype()})
                  : kernels::matmul(g, bv, {},
                                    {.transpose_b = !transpose_b, .out_dtype = av.dtype()});
          ctx.set(0, da);
        }
        if (ctx.needs(1)) {
          // dB = op(A)^T . g, stored transposed when B was.
          Tensor db =
              transpose_b
                  ? kernels::matmul(
                        g, av, {},
                        {.transpose_a = true, .transpose_b = transpose_a, .out_dtype = bv.dtype()})
                  : kernels::matmul(av, g, {},
                                    {.transpose_a = !transpose_a, .out_dtype = bv.dtype()});
          ctx.set(1, db);
        }
      });
}

Variable linear(const Variable& x, const Variable& weight, const Variable& bias,
                const LinearOptions& options) {
  check_compute_dtype(options.compute_dtype, "linear");
  const Tensor& xv = x.value();
  const Tensor& wv = weight.value();
  if (xv.rank() < 2 || wv.rank() != 2 || xv.dim(xv.rank() - 1) != wv.dim(1)) {
    TANDEM_THROW(ShapeError, "linear: input ", xv.shape().to_string(), " does not fit weight ",
                 wv.shape().to_string(), " (expected input (..., ", wv.rank() == 2 ? wv.dim(1) : -1,
                 "))");
  }
  if (xv.rank() > 2) {
    // (..., in) -> (rows, in) -> (rows, out) -> (..., out), as PyTorch's Linear.
    std::vector<int64_t> dims(xv.shape().dims().begin(), xv.shape().dims().end());
    const int64_t in = dims.back();
    int64_t rows_count = 1;
    for (size_t i = 0; i + 1 < dims.size(); ++i) rows_count *= dims[i];
    dims.back() = wv.dim(0);
    const Variable rows = reshape(x, Shape{rows_count, in});
    return reshape(linear(rows, weight, bias, options), Shape(dims));
  }
  const bool recording = records_grad({&x, &weight, &bias});
  const bool fused = fuse(options.activation, recording);
  const Tensor xc = xv.to(options.compute_dtype);
  const Tensor wc = weight.value_as(options.compute_dtype);
  const Tensor bv = bias.defined() ? bias.value() : Tensor();
  const DType out_dtype = output_dtype(options.output_dtype, xv.dtype());
  Tensor y = kernels::matmul(xc, wc, bv,
                             {.transpose_b = true,
                              .activation = fused ? options.activation : Activation::none,
                              .out_dtype = matmul_output(out_dtype)});
  if (y.dtype() != out_dtype) y = y.to(out_dtype);
  const Activation saved_activation = fused ? options.activation : Activation::none;
  Variable out = record_op(
      "linear", y, {&x, &weight, &bias},
      [xv, wc, y = kept_output(y, saved_activation), saved_activation, x_dtype = xv.dtype(),
       w_dtype = wv.dtype(), compute = options.compute_dtype](BackwardContext& ctx) {
        const Tensor g = kernels::activation_backward(saved_activation, ctx.grad_output(), y);
        const Tensor gc = g.to(compute);
        if (ctx.needs(0)) {
          ctx.set(0,
                  kernels::matmul(gc, wc, {}, {.out_dtype = matmul_output(x_dtype)}).to(x_dtype));
        }
        // The bias gradient (f32, of g's own values, before the cast) comes
        // with the weight gradient where it is the sum of gc's columns.
        const bool together = ctx.needs(1) && ctx.needs(2) && gc.dtype() == g.dtype();
        Tensor db = together ? Tensor::empty(Shape{g.dim(1)}, DType::f32, g.device()) : Tensor();
        if (ctx.needs(1)) {
          // Cast again rather than keep the cast copy alive until backward: the
          // input itself is held anyway (by the caller, or as the previous
          // layer's saved output), so a kept copy (e.g. of the f32 network input
          // under a bf16 policy) would only add to the activation memory.
          const Tensor x_compute = xv.to(compute);
          // Weight gradients are gradient memory, not activations, whatever
          // the policy (the accounting compares activations across policies).
          Tensor dw = ctx.destination(1);
          if (!dw.defined())
            dw = Tensor::empty(wc.shape(), w_dtype, wc.device(), MemoryCategory::gradients);
          kernels::linear_backward_weights(gc, x_compute, dw, together ? &db : nullptr);
          ctx.set(1, dw);
        }
        if (ctx.needs(2)) ctx.set(2, together ? db : kernels::sum_to_shape(g, Shape{g.dim(1)}));
      });
  if (!fused) return activation(out, options.activation);
  return out;
}

Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias,
                const Conv2dOptions& options) {
  check_compute_dtype(options.compute_dtype, "conv2d");
  const Tensor& xv = x.value();
  const Tensor& wv = weight.value();
  const bool recording = records_grad({&x, &weight, &bias});
  const bool fused = fuse(options.activation, recording);
  const Tensor xc = xv.to(options.compute_dtype);
  const Tensor wc = weight.value_as(options.compute_dtype);
  const Tensor bv = bias.defined() ? bias.value() : Tensor();
  const kernels::Conv2dGeometry geometry = options.geometry;
  const DType out_dtype = output_dtype(options.output_dtype, xv.dtype());
  Tensor y =
      kernels::conv2d_forward(xc, wc, bv, geometry, fused ? options.activation : Activation::none,
                              matmul_output(out_dtype));
  if (y.dtype() != out_dtype) y = y.to(out_dtype);
  const Activation saved_activation = fused ? options.activation : Activation::none;
  Variable out = record_op(
      "conv2d", y, {&x, &weight, &bias},
      [xv, wc, y = kept_output(y, saved_activation), saved_activation, geometry,
       x_dtype = xv.dtype(), w_dtype = wv.dtype(),
       b_dtype = bias.defined() ? bias.value().dtype() : DType::f32,
       compute = options.compute_dtype](BackwardContext& ctx) {
        const Tensor g = kernels::activation_backward(saved_activation, ctx.grad_output(), y);
        const Tensor gc = g.to(compute);
        if (ctx.needs(0)) {
          ctx.set(
              0, kernels::conv2d_backward_data(gc, wc, xv.shape(), geometry, matmul_output(x_dtype))
                     .to(x_dtype));
        }
        // xv cast again: see linear().
        set_conv_weight_gradients(ctx, wc, w_dtype, b_dtype, [&](Tensor& dw, Tensor* db) {
          kernels::conv2d_backward_weights(xv.to(compute), gc, geometry, dw, db);
        });
      });
  if (!fused) return activation(out, options.activation);
  return out;
}

Variable conv2d_max_pool_relu(const Variable& x, const Variable& weight, const Variable& bias,
                              const Conv2dOptions& options, const kernels::Pool2dGeometry& pool) {
  check_compute_dtype(options.compute_dtype, "conv2d_max_pool_relu");
  if (options.activation != Activation::none && options.activation != Activation::relu) {
    TANDEM_THROW(InvalidArgument, "conv2d_max_pool_relu: the convolution's activation must be ",
                 "none or relu (applied after the pooling), got ",
                 kernels::activation_name(options.activation));
  }
  const Tensor& xv = x.value();
  const DType out_dtype = output_dtype(options.output_dtype, xv.dtype());
  // An f16 result is pooled in f32 and narrowed after: the same values
  // (rounding keeps the order), and unfused the full-size convolution
  // output stayed alive for the pooling's backward (f16 held more
  // activation memory than f32).
  const DType pooled_dtype = matmul_output(out_dtype);
  if (!kernels::conv2d_max_pool_fuses(xv.shape(), options.compute_dtype, xv.device().kind, pool,
                                      pooled_dtype)) {
    Conv2dOptions convolution = options;
    convolution.activation = Activation::none;
    return max_pool2d_relu(conv2d(x, weight, bias, convolution), pool);
  }
  const Tensor xc = xv.to(options.compute_dtype);
  const Tensor wc = weight.value_as(options.compute_dtype);
  kernels::MaxPoolResult r = kernels::conv2d_max_pool_relu_forward(
      xc, wc, bias.defined() ? bias.value() : Tensor(), options.geometry, pool, pooled_dtype,
      records_grad({&x, &weight, &bias}));
  if (r.y.dtype() != out_dtype) r.y = r.y.to(out_dtype);
  return record_op(
      "conv2d_max_pool_relu", r.y, {&x, &weight, &bias},
      [xv, wc, workspace = r.workspace, geometry = options.geometry, pool, x_dtype = xv.dtype(),
       w_dtype = weight.value().dtype(),
       b_dtype = bias.defined() ? bias.value().dtype() : DType::f32,
       compute = options.compute_dtype](BackwardContext& ctx) {
        // Cast before the pooling's backward spreads it: the same bits as
        // after, on a quarter of the values.
        const Tensor gc = ctx.grad_output().to(compute);
        if (ctx.needs(0)) {
          const Shape y = kernels::conv2d_output_shape(xv.shape(), wc.shape(), geometry);
          const Tensor g = kernels::max_pool2d_backward(gc, workspace, y, pool);
          ctx.set(0,
                  kernels::conv2d_backward_data(g, wc, xv.shape(), geometry, matmul_output(x_dtype))
                      .to(x_dtype));
        }
        set_conv_weight_gradients(ctx, wc, w_dtype, b_dtype, [&](Tensor& dw, Tensor* db) {
          kernels::conv2d_max_pool_backward_weights(xv.to(compute), gc, workspace, geometry, pool,
                                                    dw, db);
        });
      });
}

namespace {

Variable recorded_max_pool(const char* op, const Variable& x,
                           const kernels::Pool2dGeometry& geometry, bool relu) {
  const bool recording = records_grad({&x});
  kernels::MaxPoolResult r = kernels::max_pool2d_forward(x.value(), geometry, recording, relu);
  return record_op(
      op, r.y, {&x},
      [workspace = r.workspace, x_shape = x.shape(), geometry](BackwardContext& ctx) {
        ctx.set(0, kernels::max_pool2d_backward(ctx.grad_output(), workspace, x_shape, geometry));
      });
}

}  // namespace

Variable max_pool2d(const Variable& x, const kernels::Pool2dGeometry& geometry) {
  return recorded_max_pool("max_pool2d", x, geometry, false);
}

Variable max_pool2d_relu(const Variable& x, const kernels::Pool2dGeometry& geometry) {
  if (x.value().device().kind != DeviceKind::cpu) return relu(max_pool2d(x, geometry));
  return recorded_max_pool("max_pool2d_relu", x, geometry, true);
}

Variable avg_pool2d(const Variable& x, const kernels::Pool2dGeometry& geometry) {
  return record_op("avg_pool2d", kernels::avg_pool2d(x.value(), geometry), {&x},
                   [x_shape = x.shape(), geometry](BackwardContext& ctx) {
                     ctx.set(0, kernels::avg_pool2d_backward(ctx.grad_output(), x_shape, geometry));
                   });
}

Variable global_avg_pool(const Variable& x) {
  return record_op("global_avg_pool", kernels::global_avg_pool(x.value()), {&x},
                   [x_shape = x.shape()](BackwardContext& ctx) {
                     ctx.set(0, kernels::global_avg_pool_backward(ctx.grad_output(), x_shape));
                   });
}

}  // namespace tandem
