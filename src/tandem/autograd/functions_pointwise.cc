// Differentiable pointwise ops, reductions and shape changes.
#include <limits>
#include <string>
#include <vector>

#include "tandem/autograd/functions.h"
#include "tandem/autograd/node.h"
#include "tandem/base/error.h"
#include "tandem/kernels/dropout.h"
#include "tandem/kernels/elementwise.h"
#include "tandem/kernels/layout.h"
#include "tandem/kernels/reduce.h"
#include "tandem/kernels/unary.h"

namespace tandem {
namespace {

// A recorded kernels::unary with its backward from x and y.
Variable unary_function(kernels::UnaryOp op, const Variable& x) {
  const Tensor xv = x.value();
  const Tensor y = kernels::unary(op, xv);
  // unary_op_name returns string literals: data() is null-terminated.
  return record_op(kernels::unary_op_name(op).data(), y, {&x}, [op, xv, y](BackwardContext& ctx) {
    ctx.set(0, kernels::unary_backward(op, ctx.grad_output(), xv, y));
  });
}

// The gradient of a broadcast operand of `shape` and `dtype` from g (of the
// output's shape): g itself when the operand was not broadcast (a residual
// add), else summed over the broadcast dimensions.
Tensor gradient_for(const Tensor& g, const Shape& shape, DType dtype) {
  if (g.shape() == shape && g.dtype() == dtype) return g;
  return kernels::sum_to_shape(g, shape).to(dtype);
}

}  // namespace

Variable relu(const Variable& x) {
  Tensor y = kernels::relu(x.value());
  return record_op("relu", y, {&x}, [y](BackwardContext& ctx) {
    ctx.set(0, kernels::relu_backward(ctx.grad_output(), y));
  });
}

Variable gelu(const Variable& x) {
  const Tensor xv = x.value();
  return record_op("gelu", kernels::gelu(xv), {&x}, [xv](BackwardContext& ctx) {
    ctx.set(0, kernels::gelu_backward(ctx.grad_output(), xv));
  });
}

Variable gelu_tanh(const Variable& x) {
  const Tensor xv = x.value();
  return record_op("gelu_tanh", kernels::gelu_tanh(xv), {&x}, [xv](BackwardContext& ctx) {
    ctx.set(0, kernels::gelu_tanh_backward(ctx.grad_output(), xv));
  });
}

Variable silu(const Variable& x) {
  const Tensor xv = x.value();
  return record_op("silu", kernels::silu(xv), {&x}, [xv](BackwardContext& ctx) {
    ctx.set(0, kernels::silu_backward(ctx.grad_output(), xv));
  });
}

Variable activation(const Variable& x, kernels::Activation activation) {
  switch (activation) {
    case kernels::Activation::none:
      return x;
    case kernels::Activation::relu:
      return relu(x);
    case kernels::Activation::gelu:
      return gelu(x);
    case kernels::Activation::gelu_tanh:
      return gelu_tanh(x);
    case kernels::Activation::silu:
      return silu(x);
  }
  return x;
}

Variable dropout(const Variable& x, float p, bool training, Generator& generator) {
  if (!(p >= 0.0f && p < 1.0f)) {
    TANDEM_THROW(InvalidArgument, "dropout probability must be in [0, 1), got ", p);
  }
  if (!training || p == 0.0f) return x;
  const uint64_t offset = generator.reserve(x.value().numel());
  kernels::DropoutResult r = kernels::dropout(x.value(), p, generator.seed(), offset);
  return record_op("dropout", r.y, {&x}, [mask = r.mask, p](BackwardContext& ctx) {
    ctx.set(0, kernels::dropout_backward(ctx.grad_output(), mask, p));
  });
}

Variable add(const Variable& a, const Variable& b) {
  return record_op("add", kernels::add(a.value(), b.value()), {&a, &b},
                   [b_shape = b.shape(), b_dtype = b.dtype()](BackwardContext& ctx) {
                     const Tensor& g = ctx.grad_output();
                     if (ctx.needs(0)) ctx.set(0, g);
                     if (ctx.needs(1)) ctx.set(1, gradient_for(g, b_shape, b_dtype));
                   });
}

Variable add_relu(const Variable& a, const Variable& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return relu(add(a, b));
  Tensor y = kernels::add_relu(a.value(), b.value());
  return record_op("add_relu", y, {&a, &b}, [y](BackwardContext& ctx) {
    const Tensor g = kernels::relu_backward(ctx.grad_output(), y);
    if (ctx.needs(0)) ctx.set(0, g);
    if (ctx.needs(1)) ctx.set(1, g);
  });
}

Variable mul(const Variable& a, const Variable& b) {
  const Tensor av = a.value(), bv = b.value();
  return record_op("mul", kernels::mul(av, bv), {&a, &b}, [av, bv](BackwardContext& ctx) {
    const Tensor& g = ctx.grad_output();
    if (ctx.needs(0)) ctx.set(0, kernels::mul(g, bv));
    if (ctx.needs(1)) {
      ctx.set(1, gradient_for(kernels::mul(g, av), bv.shape(), bv.dtype()));
    }
  });
}

Variable sub(const Variable& a, const Variable& b) {
  return add(a, scale(b, -1.0f));
}

Variable div(const Variable& a, const Variable& b) {
  return mul(a, unary_function(kernels::UnaryOp::reciprocal, b));
}

Variable exp(const Variable& x) {
  return unary_function(kernels::UnaryOp::exp, x);
}

Variable log(const Variable& x) {
  return unary_function(kernels::UnaryOp::log, x);
}

Variable sigmoid(const Variable& x) {
  return unary_function(kernels::UnaryOp::sigmoid, x);
}

Variable tanh(const Variable& x) {
  return unary_function(kernels::UnaryOp::tanh, x);
}

Variable scale(const Variable& a, float factor) {
  return record_op(
      "scale", kernels::scale(a.value(), factor), {&a},
      [factor](BackwardContext& ctx) { ctx.set(0, kernels::scale(ctx.grad_output(), factor)); });
}

Variable sum(const Variable& x) {
  return record_op(
      "sum", kernels::sum(x.value()), {&x},
      [shape = x.shape(), dtype = x.dtype(), device = x.value().device()](BackwardContext& ctx) {
        ctx.set(0, Tensor::full(shape, ctx.grad_output().item(), dtype, device));
      });
}

Variable mean(const Variable& x) {
  return record_op(
      "mean", kernels::mean(x.value()), {&x},
      [shape = x.shape(), dtype = x.dtype(), device = x.value().device()](BackwardContext& ctx) {
        const float g = ctx.grad_output().item() / static_cast<float>(shape.numel());
        ctx.set(0, Tensor::full(shape, g, dtype, device));
      });
}

Variable sum(const Variable& x, int axis, bool keepdim) {
  const int a = kernels::normalize_axis(axis, x.value().rank());
  Tensor y = kernels::sum_axis(x.value(), a);
  if (keepdim) {
    std::vector<int64_t> dims = x.shape().to_vector();
    dims[static_cast<size_t>(a)] = 1;
    y = y.reshape(Shape(dims));
  }
  return record_op("sum_axis", y, {&x},
                   [a, shape = x.shape(), dtype = x.dtype()](BackwardContext& ctx) {
                     std::vector<int64_t> reduced = shape.to_vector();
                     const int64_t size = reduced[static_cast<size_t>(a)];
                     reduced.erase(reduced.begin() + a);
                     const Tensor g = ctx.grad_output().reshape(Shape(reduced));
                     ctx.set(0, kernels::expand_axis(g, a, size).to(dtype));
                   });
}

Variable mean(const Variable& x, int axis, bool keepdim) {
  const int a = kernels::normalize_axis(axis, x.value().rank());
  const int64_t n = x.shape().dims()[static_cast<size_t>(a)];
  return scale(sum(x, a, keepdim),
               n > 0 ? 1.0f / static_cast<float>(n) : std::numeric_limits<float>::quiet_NaN());
}

Variable reshape(const Variable& x, const Shape& shape) {
  return record_op(
      "reshape", x.value().reshape(shape), {&x},
      [from = x.shape()](BackwardContext& ctx) { ctx.set(0, ctx.grad_output().reshape(from)); });
}

Variable flatten(const Variable& x) {
  if (x.value().rank() < 1) TANDEM_THROW(ShapeError, "flatten needs rank >= 1, got a scalar");
  return reshape(x, Shape{x.shape()[0], x.shape().row_numel()});
}

Variable cast(const Variable& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return record_op("cast", x.value().to(dtype), {&x}, [from = x.dtype()](BackwardContext& ctx) {
    ctx.set(0, ctx.grad_output().to(from));
  });
}

}  // namespace tandem
