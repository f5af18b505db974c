// Differentiable matmul, linear, conv2d and max-pool: the oneDNN-backed ops.
#include "tandem/autograd/functions.h"
#include "tandem/autograd/node.h"
#include "tandem/base/error.h"
#include "tandem/kernels/matmul.h"
#include "tandem/kernels/reduce.h"

namespace tandem {
namespace {

using kernels::Activation;

// gelu's backward needs its input, which a fused epilogue never materialises,
// so gelu is only fused when no gradient will be taken.
bool fuse(Activation activation, bool recording) {
  return activation == Activation::relu || (activation == Activation::gelu && !recording);
}

void check_compute_dtype(DType dtype, const char* op) {
  if (dtype != DType::f32 && dtype != DType::bf16) {
    TANDEM_THROW(InvalidArgument, op, ": compute dtype must be f32 or bf16, got ",
                 dtype_name(dtype));
  }
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
  if (xv.rank() != 2 || wv.rank() != 2 || xv.dim(1) != wv.dim(1)) {
    TANDEM_THROW(ShapeError, "linear: input ", xv.shape().to_string(), " does not fit weight ",
                 wv.shape().to_string(), " (expected input (B, ", wv.rank() == 2 ? wv.dim(1) : -1,
                 "))");
  }
  const bool recording = records_grad({&x, &weight, &bias});
  const bool fused = fuse(options.activation, recording);
  const Tensor xc = xv.to(options.compute_dtype);
  const Tensor wc = wv.to(options.compute_dtype);
  const Tensor bv = bias.defined() ? bias.value() : Tensor();
  Tensor y = kernels::matmul(xc, wc, bv,
                             {.transpose_b = true,
                              .activation = fused ? options.activation : Activation::none,
                              .out_dtype = xv.dtype()});
  const Activation saved_activation = fused ? options.activation : Activation::none;
  Variable out = record_op(
      "linear", y, {&x, &weight, &bias},
      [xc, wc, y, saved_activation, x_dtype = xv.dtype(), w_dtype = wv.dtype(),
       compute = options.compute_dtype](BackwardContext& ctx) {
        const Tensor g = kernels::activation_backward(saved_activation, ctx.grad_output(), y);
        const Tensor gc = g.to(compute);
        if (ctx.needs(0)) ctx.set(0, kernels::matmul(gc, wc, {}, {.out_dtype = x_dtype}));
        if (ctx.needs(1)) {
          ctx.set(1, kernels::matmul(gc, xc, {}, {.transpose_a = true, .out_dtype = w_dtype}));
        }
        if (ctx.needs(2)) ctx.set(2, kernels::sum_to_shape(g, Shape{g.dim(1)}));
      });
  if (!fused && options.activation == Activation::gelu) return gelu(out);
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
  const Tensor wc = wv.to(options.compute_dtype);
  const Tensor bv = bias.defined() ? bias.value() : Tensor();
  const kernels::Conv2dGeometry geometry = options.geometry;
  Tensor y = kernels::conv2d_forward(xc, wc, bv, geometry,
                                     fused ? options.activation : Activation::none, xv.dtype());
  const Activation saved_activation = fused ? options.activation : Activation::none;
  Variable out = record_op(
      "conv2d", y, {&x, &weight, &bias},
      [xc, wc, y, saved_activation, geometry, x_dtype = xv.dtype(), w_dtype = wv.dtype(),
       compute = options.compute_dtype](BackwardContext& ctx) {
        const Tensor g = kernels::activation_backward(saved_activation, ctx.grad_output(), y);
        const Tensor gc = g.to(compute);
        if (ctx.needs(0)) {
          ctx.set(0, kernels::conv2d_backward_data(gc, wc, xc.shape(), geometry, x_dtype));
        }
        if (ctx.needs(1) || ctx.needs(2)) {
          Tensor dw = Tensor::empty(wc.shape(), DType::f32, wc.device());
          Tensor db = Tensor::empty(Shape{wc.dim(3)}, DType::f32, wc.device());
          kernels::conv2d_backward_weights(xc, gc, geometry, dw, ctx.needs(2) ? &db : nullptr);
          if (ctx.needs(1)) ctx.set(1, dw.to(w_dtype));
          if (ctx.needs(2)) ctx.set(2, db);
        }
      });
  if (!fused && options.activation == Activation::gelu) return gelu(out);
  return out;
}

Variable max_pool2d(const Variable& x, const kernels::Pool2dGeometry& geometry) {
  const bool recording = records_grad({&x});
  kernels::MaxPoolResult r = kernels::max_pool2d_forward(x.value(), geometry, recording);
  return record_op(
      "max_pool2d", r.y, {&x},
      [workspace = r.workspace, x_shape = x.shape(), geometry](BackwardContext& ctx) {
        ctx.set(0, kernels::max_pool2d_backward(ctx.grad_output(), workspace, x_shape, geometry));
      });
}

}  // namespace tandem
