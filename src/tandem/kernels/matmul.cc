#include "tandem/kernels/matmul.h"

#include <vector>

#include "tandem/kernels/detail/onednn.h"
#include "tandem/kernels/flops.h"

namespace tandem::kernels {
namespace {

using dnnl::memory;

struct MatmulPrimitive {
  dnnl::matmul primitive;
  memory::desc a, b, bias, out, scratchpad;
};

struct MatmulDims {
  int64_t M, K, N;
};

// Checks ranks and the contracted dimension; returns the problem's sizes.
MatmulDims matmul_dims(const Tensor& a, const Tensor& b, const MatmulOptions& o) {
  if (a.rank() != 2 || b.rank() != 2) {
    TANDEM_THROW(ShapeError, "matmul needs rank-2 operands, got a ", a.shape().to_string(),
                 " and b ", b.shape().to_string());
  }
  const MatmulDims d{o.transpose_a ? a.dim(1) : a.dim(0), o.transpose_a ? a.dim(0) : a.dim(1),
                     o.transpose_b ? b.dim(0) : b.dim(1)};
  if (d.K != (o.transpose_b ? b.dim(1) : b.dim(0))) {
    TANDEM_THROW(ShapeError, "matmul: inner dimensions differ: a ", a.shape().to_string(),
                 o.transpose_a ? " (transposed)" : "", " and b ", b.shape().to_string(),
                 o.transpose_b ? " (transposed)" : "");
  }
  return d;
}

void check_operands(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
                    const MatmulDims& d) {
  if (a.dtype() != b.dtype() || (a.dtype() != DType::f32 && a.dtype() != DType::bf16)) {
    TANDEM_THROW(ShapeError, "matmul: operands must both be f32 or both bf16, got ",
                 dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  }
  if (bias.defined() && (bias.numel() != d.N || bias.dtype() != DType::f32)) {
    TANDEM_THROW(ShapeError, "matmul: bias must be f32 with ", d.N, " elements, got ",
                 bias.to_string());
  }
  if (out.shape() != Shape{d.M, d.N}) {
    TANDEM_THROW(ShapeError, "matmul: output shape ", out.shape().to_string(), " should be (", d.M,
                 ", ", d.N, ")");
  }
  if (out.dtype() != DType::f32 && out.dtype() != DType::bf16) {
    TANDEM_THROW(ShapeError, "matmul: output dtype must be f32 or bf16, got ",
                 dtype_name(out.dtype()));
  }
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const MatmulOptions& options) {
  const MatmulDims d = matmul_dims(a, b, options);
  Tensor out = Tensor::empty(Shape{d.M, d.N}, options.out_dtype, a.device());
  matmul_into(a, b, bias, out, options);
  return out;
}

void matmul_into(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out,
                 const MatmulOptions& options) {
  const MatmulDims d = matmul_dims(a, b, options);
  check_operands(a, b, bias, out, d);
  const int64_t M = d.M, K = d.K, N = d.N;
  if (M == 0 || N == 0) return;
  if (K == 0) {
    // oneDNN rejects empty reductions; the product is zero (plus bias).
    if (bias.defined()) {
      Tensor row = bias.reshape(Shape{1, N});
      for (int64_t m = 0; m < M; ++m) out.slice(m, m + 1).copy_from(row);
    } else {
      out.zero();
    }
    if (options.activation != Activation::none) out.copy_from(activate(options.activation, out));
    return;
  }
  const std::string key = tandem::detail::concat(
      "matmul:", detail::key_of(a), options.transpose_a, detail::key_of(b), options.transpose_b,
      bias.defined(), static_cast<int>(options.activation), dtype_name(out.dtype()));
  auto prim = detail::cached<MatmulPrimitive>(key, [&] {
    return detail::guarded("matmul primitive creation", [&] {
      auto p = std::make_shared<MatmulPrimitive>();
      const auto dt_in = detail::to_dnnl(a.dtype());
      p->a = options.transpose_a ? memory::desc({M, K}, dt_in, memory::dims{1, M})
                                 : memory::desc({M, K}, dt_in, memory::dims{K, 1});
      p->b = options.transpose_b ? memory::desc({K, N}, dt_in, memory::dims{1, K})
                                 : memory::desc({K, N}, dt_in, memory::dims{N, 1});
      p->out = memory::desc({M, N}, detail::to_dnnl(out.dtype()), memory::dims{N, 1});
      if (bias.defined())
        p->bias = memory::desc({1, N}, memory::data_type::f32, memory::dims{N, 1});
      dnnl::primitive_attr attr = detail::user_scratchpad_attr();
      if (options.activation != Activation::none) {
        attr.set_post_ops(detail::activation_post_op(options.activation));
      }
      dnnl::matmul::desc desc(p->a, p->b, p->bias, p->out);
      dnnl::matmul::primitive_desc pd(desc, attr, detail::cpu_engine());
      p->primitive = dnnl::matmul(pd);
      p->scratchpad = pd.scratchpad_desc();
      return p;
    });
  });
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, detail::memory_of(a, prim->a)},
                                       {DNNL_ARG_WEIGHTS, detail::memory_of(b, prim->b)},
                                       {DNNL_ARG_DST, detail::memory_of(out, prim->out)}};
  if (bias.defined()) args.emplace(DNNL_ARG_BIAS, detail::memory_of(bias, prim->bias));
  detail::guarded("matmul", [&] {
    detail::execute(prim->primitive, prim->scratchpad, std::move(args), out.device());
  });
  count_flops(2 * M * N * K);
}

namespace {

// The output shape of a batched matmul; checks the operands.
Shape batched_output_shape(const Tensor& a, const Tensor& b, const MatmulOptions& options) {
  const int ra = a.rank(), rb = b.rank();
  bool fits = ra >= 2 && (rb == 2 || rb == ra);
  for (int i = 0; fits && rb == ra && i < ra - 2; ++i) fits = a.dim(i) == b.dim(i);
  if (!fits) {
    TANDEM_THROW(ShapeError, "batched_matmul: b ", b.shape().to_string(),
                 " must have a's leading dimensions or rank 2; a is ", a.shape().to_string());
  }
  const int64_t M = options.transpose_a ? a.dim(ra - 1) : a.dim(ra - 2);
  const int64_t K = options.transpose_a ? a.dim(ra - 2) : a.dim(ra - 1);
  const int64_t N = options.transpose_b ? b.dim(rb - 2) : b.dim(rb - 1);
  if (K != (options.transpose_b ? b.dim(rb - 1) : b.dim(rb - 2))) {
    TANDEM_THROW(ShapeError, "batched_matmul: inner dimensions differ: a ", a.shape().to_string(),
                 options.transpose_a ? " (transposed)" : "", " and b ", b.shape().to_string(),
                 options.transpose_b ? " (transposed)" : "");
  }
  if (a.dtype() != b.dtype() || (a.dtype() != DType::f32 && a.dtype() != DType::bf16)) {
    TANDEM_THROW(ShapeError, "batched_matmul: operands must both be f32 or both bf16, got ",
                 dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  }
  std::vector<int64_t> dims(a.shape().dims().begin(), a.shape().dims().end());
  dims[static_cast<size_t>(ra - 2)] = M;
  dims[static_cast<size_t>(ra - 1)] = N;
  return Shape(dims);
}

}  // namespace

Tensor batched_matmul(const Tensor& a, const Tensor& b, const MatmulOptions& options) {
  Tensor out =
      Tensor::empty(batched_output_shape(a, b, options), options.out_dtype, a.device());
  batched_matmul_into(a, b, out, options);
  return out;
}

void batched_matmul_into(const Tensor& a, const Tensor& b, Tensor& out,
                         const MatmulOptions& options) {
  const Shape shape = batched_output_shape(a, b, options);
  if (out.shape() != shape) {
    TANDEM_THROW(ShapeError, "batched_matmul: output shape ", out.shape().to_string(),
                 " should be ", shape.to_string());
  }
  if (out.dtype() != DType::f32 && out.dtype() != DType::bf16) {
    TANDEM_THROW(ShapeError, "batched_matmul: output dtype must be f32 or bf16, got ",
                 dtype_name(out.dtype()));
  }
  const int ra = a.rank(), rb = b.rank();
  int64_t batch = 1;
  for (int i = 0; i < ra - 2; ++i) batch *= a.dim(i);
  const int64_t M = shape.dim(ra - 2), N = shape.dim(ra - 1);
  const int64_t K = options.transpose_a ? a.dim(ra - 2) : a.dim(ra - 1);
  if (out.numel() == 0) return;
  if (K == 0) {
    out.zero();
    if (options.activation != Activation::none) out.copy_from(activate(options.activation, out));
    return;
  }
  const int64_t Bb = rb == 2 ? 1 : batch;
  const std::string key = tandem::detail::concat(
      "bmm:", detail::key_of(a), options.transpose_a, detail::key_of(b), options.transpose_b,
      static_cast<int>(options.activation), dtype_name(out.dtype()));
  auto prim = detail::cached<MatmulPrimitive>(key, [&] {
    return detail::guarded("batched matmul primitive creation", [&] {
      auto p = std::make_shared<MatmulPrimitive>();
      const auto dt_in = detail::to_dnnl(a.dtype());
      p->a = options.transpose_a ? memory::desc({batch, M, K}, dt_in, memory::dims{M * K, 1, M})
                                 : memory::desc({batch, M, K}, dt_in, memory::dims{M * K, K, 1});
      p->b = options.transpose_b ? memory::desc({Bb, K, N}, dt_in, memory::dims{K * N, 1, K})
                                 : memory::desc({Bb, K, N}, dt_in, memory::dims{K * N, N, 1});
      p->out = memory::desc({batch, M, N}, detail::to_dnnl(out.dtype()),
                            memory::dims{M * N, N, 1});
      dnnl::primitive_attr attr = detail::user_scratchpad_attr();
      if (options.activation != Activation::none)
        attr.set_post_ops(detail::activation_post_op(options.activation));
      dnnl::matmul::desc desc(p->a, p->b, p->out);
      dnnl::matmul::primitive_desc pd(desc, attr, detail::cpu_engine());
      p->primitive = dnnl::matmul(pd);
      p->scratchpad = pd.scratchpad_desc();
      return p;
    });
  });
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, detail::memory_of(a, prim->a)},
                                       {DNNL_ARG_WEIGHTS, detail::memory_of(b, prim->b)},
                                       {DNNL_ARG_DST, detail::memory_of(out, prim->out)}};
  detail::guarded("batched matmul", [&] {
    detail::execute(prim->primitive, prim->scratchpad, std::move(args), out.device());
  });
  count_flops(2 * batch * M * N * K);
}

}  // namespace tandem::kernels
