#include "tandem/kernels/matmul.h"

#include <atomic>
#include <optional>
#include <vector>

#include "tandem/kernels/detail/bf16_batched_matmul.h"
#include "tandem/kernels/detail/bf16_weight_gradient.h"
#include "tandem/kernels/detail/causal_products.h"
#include "tandem/kernels/detail/causal_products_avx512.h"
#include "tandem/kernels/detail/checks.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/gelu_avx512.h"
#include "tandem/kernels/detail/onednn.h"
#include "tandem/kernels/flops.h"
#include "tandem/kernels/reduce.h"

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

// A problem as oneDNN sees it: `batch` products of (M, K) x (K, N), b shared
// over the batch when b_batch is 1; batched says whether the descriptors
// carry the batch dimension (batched_matmul) or are rank 2 (matmul).
struct Problem {
  int64_t batch, b_batch, M, K, N;
  bool batched;
};

// A rows x cols operand, stored transposed when `transposed`.
memory::desc operand_desc(const Problem& p, int64_t batch, int64_t rows, int64_t cols,
                          bool transposed, memory::data_type dtype) {
  const int64_t row_stride = transposed ? 1 : cols, col_stride = transposed ? rows : 1;
  if (!p.batched) return memory::desc({rows, cols}, dtype, memory::dims{row_stride, col_stride});
  return memory::desc({batch, rows, cols}, dtype,
                      memory::dims{rows * cols, row_stride, col_stride});
}

// out = activation(a x b + bias) for checked operands; `op` names the
// caller in the cache key and in errors.
void run_matmul(const char* op, const Problem& p, const Tensor& a, const Tensor& b,
                const Tensor& bias, Tensor& out, const MatmulOptions& options,
                std::optional<detail::CausalPart> part = std::nullopt) {
  if (out.numel() == 0) return;
  if (p.K == 0) {
    // oneDNN rejects empty reductions; the product is zero (plus bias).
    if (bias.defined()) {
      Tensor rows = out.reshape(Shape{out.numel() / p.N, p.N});
      const Tensor row = bias.reshape(Shape{1, p.N});
      for (int64_t m = 0; m < rows.dim(0); ++m) rows.slice(m, m + 1).copy_from(row);
    } else {
      out.zero();
    }
    if (options.activation != Activation::none) out.copy_from(activate(options.activation, out));
    return;
  }
  // GELU as the separate op computes it (see gelu_follows_product).
  if (detail::gelu_follows_product(options.activation, a.dtype(), out.dtype(), out.device())) {
    MatmulOptions product = options;
    product.activation = Activation::none;
    run_matmul(op, p, a, b, bias, out, product);
    detail::gelu_in_place(options.activation, out);
    return;
  }
  if (!p.batched && detail::bf16_weight_gradient_applies(a, bias, out, options, p.M, p.K, p.N)) {
    detail::bf16_weight_gradient(a, b, out, p.M, p.K, p.N, nullptr, *detail::fastest_bf16_engine());
    return;
  }
  if (p.batched &&
      detail::bf16_batched_matmul_applies(a, out, options, p.M, p.K, p.N, p.b_batch != p.batch)) {
    detail::bf16_batched_matmul(a, b, out, options, p.batch, p.M, p.K, p.N, part,
                                *detail::fastest_bf16_engine());
    return;
  }
  // In f32, rounded once into a bf16 output: bf16 operands where oneDNN
  // cannot take them (see onednn_runs_bf16: the product of the widened
  // operands), and f32 operands into a bf16 output (oneDNN 2.6 has no such
  // primitive on any CPU).
  const bool widen = detail::needs_bf16_widening(a);
  if (widen || (a.dtype() == DType::f32 && out.dtype() != DType::f32)) {
    MemoryCategoryScope temporaries(MemoryCategory::workspace);
    Tensor wide =
        out.dtype() == DType::f32 ? out : Tensor::empty(out.shape(), DType::f32, out.device());
    run_matmul(op, p, widen ? detail::widened(a) : a, widen ? detail::widened(b) : b, bias, wide,
               options);
    if (out.dtype() != DType::f32) out.copy_from(wide);
    return;
  }
  const std::string key = tandem::detail::concat(
      op, ":", detail::key_of(a), options.transpose_a, detail::key_of(b), options.transpose_b,
      bias.defined(), static_cast<int>(options.activation), dtype_name(out.dtype()));
  auto prim = detail::cached<MatmulPrimitive>(key, [&] {
    return detail::guarded(tandem::detail::concat(op, " primitive creation"), [&] {
      auto m = std::make_shared<MatmulPrimitive>();
      const auto dt_in = detail::to_dnnl(a.dtype());
      m->a = operand_desc(p, p.batch, p.M, p.K, options.transpose_a, dt_in);
      m->b = operand_desc(p, p.b_batch, p.K, p.N, options.transpose_b, dt_in);
      m->out = operand_desc(p, p.batch, p.M, p.N, false, detail::to_dnnl(out.dtype()));
      if (bias.defined()) m->bias = operand_desc(p, 1, 1, p.N, false, memory::data_type::f32);
      dnnl::primitive_attr attr = detail::user_scratchpad_attr();
      if (options.activation != Activation::none) {
        attr.set_post_ops(detail::activation_post_op(options.activation));
      }
      dnnl::matmul::desc desc(m->a, m->b, m->bias, m->out);
      dnnl::matmul::primitive_desc pd(desc, attr, detail::cpu_engine());
      m->primitive = dnnl::matmul(pd);
      m->scratchpad = pd.scratchpad_desc();
      return m;
    });
  });
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, detail::memory_of(a, prim->a)},
                                       {DNNL_ARG_WEIGHTS, detail::memory_of(b, prim->b)},
                                       {DNNL_ARG_DST, detail::memory_of(out, prim->out)}};
  if (bias.defined()) args.emplace(DNNL_ARG_BIAS, detail::memory_of(bias, prim->bias));
  detail::guarded(op, [&] {
    detail::execute(prim->primitive, prim->scratchpad, std::move(args), out.device());
  });
  count_flops(2 * p.batch * p.M * p.N * p.K);
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
  detail::check_same_device("matmul", a, {&b, &bias, &out});
  TANDEM_DISPATCH_CUDA(a, run_matmul({1, 1, d.M, d.K, d.N}, a, b, bias, out, options));
  run_matmul("matmul", {1, 1, d.M, d.K, d.N, false}, a, b, bias, out, options);
}

void linear_backward_weights(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor* db) {
  if (dy.rank() != 2 || x.rank() != 2 || dy.dim(0) != x.dim(0)) {
    TANDEM_THROW(ShapeError, "linear_backward_weights: dy ", dy.shape().to_string(), " and x ",
                 x.shape().to_string(), " must be (rows, out) and (rows, in)");
  }
  if (db != nullptr && (db->shape() != Shape{dy.dim(1)} || db->dtype() != DType::f32)) {
    TANDEM_THROW(ShapeError, "linear_backward_weights: db must be f32 ",
                 Shape{dy.dim(1)}.to_string(), ", got ", dtype_name(db->dtype()), " ",
                 db->shape().to_string());
  }
  const MatmulOptions transposed{.transpose_a = true};
  const MatmulDims d = matmul_dims(dy, x, transposed);
  check_operands(dy, x, {}, dw, d);
  const Tensor no_bias;
  detail::check_same_device("linear_backward_weights", dy,
                            {&x, &dw, db != nullptr ? db : &no_bias});
  if (dy.device().kind == DeviceKind::cpu &&
      detail::bf16_weight_gradient_applies(dy, {}, dw, transposed, d.M, d.K, d.N)) {
    detail::bf16_weight_gradient(dy, x, dw, d.M, d.K, d.N, db, *detail::fastest_bf16_engine());
    return;
  }
  matmul_into(dy, x, {}, dw, transposed);
  if (db != nullptr) db->copy_from(sum_to_shape(dy, db->shape()));
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
  Tensor out = Tensor::empty(batched_output_shape(a, b, options), options.out_dtype, a.device());
  batched_matmul_into(a, b, out, options);
  return out;
}

namespace {

// The problem of a checked batched product.
Problem batched_problem(const Tensor& a, const Tensor& b, const Tensor& out,
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
  detail::check_same_device("batched_matmul", a, {&b, &out});
  const int ra = a.rank(), rb = b.rank();
  int64_t batch = 1;
  for (int i = 0; i < ra - 2; ++i) batch *= a.dim(i);
  const int64_t K = options.transpose_a ? a.dim(ra - 2) : a.dim(ra - 1);
  return {batch, rb == 2 ? 1 : batch, shape.dim(ra - 2), K, shape.dim(ra - 1), true};
}

}  // namespace

void batched_matmul_into(const Tensor& a, const Tensor& b, Tensor& out,
                         const MatmulOptions& options) {
  const Problem p = batched_problem(a, b, out, options);
  TANDEM_DISPATCH_CUDA(
      a, run_matmul({p.batch, p.b_batch, p.M, p.K, p.N}, a, b, Tensor(), out, options));
  run_matmul("batched_matmul", p, a, b, Tensor(), out, options);
}

void detail::causal_batched_matmul(const Tensor& a, const Tensor& b, Tensor& out,
                                   const MatmulOptions& options, CausalPart part) {
  const Problem p = batched_problem(a, b, out, options);
  if (part == CausalPart::out_lower ? p.M != p.N : p.M != p.K) {
    TANDEM_THROW(ShapeError, "causal batched_matmul: the product (", p.M, " x ", p.K, ") x (", p.K,
                 " x ", p.N, ") is not square where its causal triangle lies");
  }
  TANDEM_DISPATCH_CUDA(
      a, run_matmul({p.batch, p.b_batch, p.M, p.K, p.N}, a, b, Tensor(), out, options));
  if (out.numel() > 0 && p.K > 0 &&
      detail::causal_products_avx512_apply(a, out, options, p.M, p.N, p.b_batch != p.batch)) {
    detail::causal_products_avx512(a, b, out, options, p.batch, p.M, p.K, p.N, part);
    return;
  }
  run_matmul("batched_matmul", p, a, b, Tensor(), out, options, part);
}

namespace {
std::atomic<bool> tf32_allowed{true};
}  // namespace

void set_matmul_allow_tf32(bool allow) {
  tf32_allowed.store(allow);
}

bool matmul_allow_tf32() {
  return tf32_allowed.load();
}

}  // namespace tandem::kernels
