// Differentiable batched matmul, softmax and the layout ops (permute, slice,
// split, concat).
#include <numeric>
#include <vector>

#include "tandem/autograd/functions.h"
#include "tandem/autograd/node.h"
#include "tandem/base/error.h"
#include "tandem/kernels/layout.h"
#include "tandem/kernels/matmul.h"
#include "tandem/kernels/reduce.h"
#include "tandem/kernels/softmax.h"

namespace tandem {
namespace {

// (..., X, Y) -> (..., Y, X).
Tensor swap_last_two(const Tensor& t) {
  std::vector<int> order(static_cast<size_t>(t.rank()));
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[order.size() - 1], order[order.size() - 2]);
  return kernels::permute(t, order);
}

}  // namespace

Variable batched_matmul(const Variable& a, const Variable& b, bool transpose_a, bool transpose_b) {
  const Tensor av = a.value(), bv = b.value();
  Tensor out = kernels::batched_matmul(
      av, bv, {.transpose_a = transpose_a, .transpose_b = transpose_b, .out_dtype = av.dtype()});
  const bool shared_b = bv.rank() == 2 && av.rank() > 2;
  return record_op(
      "batched_matmul", out, {&a, &b},
      [av, bv, transpose_a, transpose_b, shared_b](BackwardContext& ctx) {
        const Tensor& g = ctx.grad_output();  // (..., M, N)
        if (ctx.needs(0)) {
          // dA = g . op(B)^T, stored transposed when A was.
          Tensor da;
          if (!transpose_a) {
            da = kernels::batched_matmul(g, bv,
                                         {.transpose_b = !transpose_b, .out_dtype = av.dtype()});
          } else if (shared_b) {
            da = swap_last_two(kernels::batched_matmul(
                g, bv, {.transpose_b = !transpose_b, .out_dtype = av.dtype()}));
          } else {
            da = kernels::batched_matmul(
                bv, g, {.transpose_a = transpose_b, .transpose_b = true, .out_dtype = av.dtype()});
          }
          ctx.set(0, da);
        }
        if (ctx.needs(1)) {
          // dB = op(A)^T . g, stored transposed when B was; summed over the
          // batch when B was shared.
          Tensor db =
              transpose_b
                  ? kernels::batched_matmul(
                        g, av,
                        {.transpose_a = true, .transpose_b = transpose_a, .out_dtype = DType::f32})
                  : kernels::batched_matmul(av, g,
                                            {.transpose_a = !transpose_a, .out_dtype = DType::f32});
          if (shared_b) db = kernels::sum_to_shape(db, bv.shape());
          ctx.set(1, db.to(bv.dtype()));
        }
      });
}

Variable softmax(const Variable& x) {
  Tensor y = kernels::softmax(x.value());
  return record_op("softmax", y, {&x}, [y](BackwardContext& ctx) {
    ctx.set(0, kernels::softmax_backward(ctx.grad_output(), y));
  });
}

Variable log_softmax(const Variable& x) {
  Tensor y = kernels::log_softmax(x.value());
  return record_op("log_softmax", y, {&x}, [y](BackwardContext& ctx) {
    ctx.set(0, kernels::log_softmax_backward(ctx.grad_output(), y));
  });
}

Variable permute(const Variable& x, const std::vector<int>& order) {
  // The forward first: it refuses an order that is not a permutation of x's
  // dimensions, with x's shape in the message.
  Tensor y = kernels::permute(x.value(), order);
  return record_op("permute", y, {&x},
                   [inverse = kernels::inverse_permutation(order)](BackwardContext& ctx) {
                     ctx.set(0, kernels::permute(ctx.grad_output(), inverse));
                   });
}

Variable transpose(const Variable& x, int dim0, int dim1) {
  std::vector<int> order(static_cast<size_t>(x.value().rank()));
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[static_cast<size_t>(kernels::normalize_axis(dim0, x.value().rank()))],
            order[static_cast<size_t>(kernels::normalize_axis(dim1, x.value().rank()))]);
  return permute(x, order);
}

Variable slice(const Variable& x, int axis, int64_t begin, int64_t end) {
  return record_op("slice", kernels::slice(x.value(), axis, begin, end), {&x},
                   [shape = x.shape(), axis, begin](BackwardContext& ctx) {
                     ctx.set(0, kernels::unslice(ctx.grad_output(), shape, axis, begin));
                   });
}

std::vector<Variable> split(const Variable& x, int axis, const std::vector<int64_t>& sizes) {
  const int a = kernels::normalize_axis(axis, x.value().rank());
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) TANDEM_THROW(ShapeError, "split: negative size ", s);
    total += s;
  }
  if (total != x.shape().dim(a)) {
    TANDEM_THROW(ShapeError, "split: sizes add up to ", total, " but dimension ", a, " of ",
                 x.shape().to_string(), " is ", x.shape().dim(a));
  }
  std::vector<Variable> parts;
  int64_t at = 0;
  for (int64_t s : sizes) {
    parts.push_back(slice(x, a, at, at + s));
    at += s;
  }
  return parts;
}

Variable concat(const std::vector<Variable>& parts, int axis) {
  std::vector<Tensor> values;
  std::vector<const Variable*> inputs;
  for (const Variable& p : parts) {
    values.push_back(p.value());
    inputs.push_back(&p);
  }
  Tensor y = kernels::concat(values, axis);
  const int a = kernels::normalize_axis(axis, y.rank());
  std::vector<int64_t> sizes;
  for (const Tensor& v : values) sizes.push_back(v.dim(a));
  return record_op("concat", y, inputs, [a, sizes](BackwardContext& ctx) {
    int64_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (ctx.needs(i)) ctx.set(i, kernels::slice(ctx.grad_output(), a, at, at + sizes[i]));
      at += sizes[i];
    }
  });
}

}  // namespace tandem
