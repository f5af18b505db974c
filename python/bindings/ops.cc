// tandem.ops and Tensor's operators: tandem's differentiable functions
// (autograd/functions.h). Operands may be tensors, numpy arrays or numbers
// (constants). Each call converts its operands holding the GIL, then
// releases it while the kernels run, so that replica threads running a
// Python forward overlap their compute.
#include <utility>

#include "common.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/random.h"

namespace tandem::python {
namespace {

// Runs fn without the GIL.
template <typename Fn>
auto released(Fn&& fn) {
  py::gil_scoped_release release;
  return fn();
}

// The other operand of a binary op, in x's dtype when it is not a tensor.
Variable operand_like(const py::handle& value, const Variable& x) {
  return as_variable(value, x.dtype());
}

// Whether b fits into a as tandem's broadcasting allows: a's shape, its
// trailing dimensions, or one element.
bool fits_into(const Shape& a, const Shape& b) {
  if (b.numel() == 1) return true;
  if (b.rank() > a.rank()) return false;
  for (int i = 1; i <= b.rank(); ++i) {
    if (b[-i] != a[-i]) return false;
  }
  return true;
}

// b without its leading size-1 dimensions ((1, C) against (N, C)).
Variable drop_leading_ones(const Variable& b) {
  std::vector<int64_t> dims = b.shape().to_vector();
  size_t first = 0;
  while (first < dims.size() && dims[first] == 1 && dims.size() - first > 1) ++first;
  if (first == 0) return b;
  return reshape(b, Shape(std::vector<int64_t>(dims.begin() + first, dims.end())));
}

enum class Binary { add, sub, mul, div };

// A binary op with broadcasting in either direction: tandem's kernels take
// the smaller operand second, so a smaller first operand is handled by
// swapping (add, mul), negating (sub) or expanding it (div).
Variable binary(Binary op, Variable a, Variable b) {
  const Variable b_fit = drop_leading_ones(b);
  const Variable a_fit = drop_leading_ones(a);
  // A one-element b of higher rank than a makes the result b's shape
  // (1.0 - t for t of shape (1,) is (1,), as numpy's): the reverse path.
  const bool forward_fits = fits_into(a.shape(), b_fit.shape()) &&
                            (b.shape().numel() != 1 || b.shape().rank() <= a.shape().rank());
  const bool reverse_fits = !forward_fits && fits_into(b.shape(), a_fit.shape());
  if (forward_fits) b = b_fit;
  py::gil_scoped_release release;
  if (!reverse_fits) {
    switch (op) {
      case Binary::add:
        return add(a, b);
      case Binary::sub:
        return sub(a, b);
      case Binary::mul:
        return mul(a, b);
      case Binary::div:
        return div(a, b);
    }
  }
  switch (op) {
    case Binary::add:
      return add(b, a_fit);
    case Binary::mul:
      return mul(b, a_fit);
    case Binary::sub:
      return scale(sub(b, a_fit), -1.0f);
    case Binary::div: {
      const Variable zeros(Tensor::zeros(b.shape(), a.dtype(), a.value().device()));
      return div(add(zeros, a_fit), b);
    }
  }
  throw std::logic_error("unreachable");
}

int normalized_axis(int axis, int rank, const char* what) {
  const int a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    throw py::index_error(std::string(what) + ": axis " + std::to_string(axis) +
                          " is out of range for a tensor of rank " + std::to_string(rank));
  }
  return a;
}

// reshape's dimensions with one -1 inferred, as numpy does.
Shape resolved_shape(const Variable& x, const py::args& args) {
  py::object spec = args.size() == 1 ? py::object(args[0]) : py::object(args);
  std::vector<int64_t> dims = integers_from(spec, "reshape");
  int unknown = -1;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      if (unknown >= 0) throw py::value_error("reshape: only one dimension can be -1");
      unknown = static_cast<int>(i);
    } else if (dims[i] < 0) {
      throw py::value_error("reshape: dimension " + std::to_string(dims[i]) + " is negative");
    } else {
      known *= dims[i];
    }
  }
  if (unknown >= 0) {
    if (known == 0 || x.value().numel() % known != 0) {
      throw py::value_error("reshape: cannot infer -1 for " + std::to_string(x.value().numel()) +
                            " elements into " + py::str(spec).cast<std::string>());
    }
    dims[unknown] = x.value().numel() / known;
  }
  return Shape(dims);
}

// x[i, a:b, ...]: ints and step-1 slices per dimension, Ellipsis; each a
// differentiable slice.
Variable index(const Variable& x, const py::object& key) {
  py::tuple keys = py::isinstance<py::tuple>(key) ? py::tuple(key) : py::make_tuple(key);
  const int rank = x.value().rank();
  std::vector<py::object> per_dim;
  int given = 0;
  for (const auto& k : keys) given += k.is(py::ellipsis()) ? 0 : 1;
  for (const auto& k : keys) {
    if (k.is(py::ellipsis())) {
      for (int i = 0; i < rank - given; ++i)
        per_dim.emplace_back(py::slice(py::none(), py::none(), py::none()));
    } else {
      per_dim.push_back(py::reinterpret_borrow<py::object>(k));
    }
  }
  if (static_cast<int>(per_dim.size()) > rank) {
    throw py::index_error("too many indices (" + std::to_string(per_dim.size()) +
                          ") for a tensor of rank " + std::to_string(rank));
  }
  Variable y = x;
  std::vector<int64_t> kept;
  for (int axis = 0; axis < rank; ++axis) {
    const int64_t size = x.value().dim(axis);
    if (axis >= static_cast<int>(per_dim.size())) {
      kept.push_back(size);
      continue;
    }
    const py::object& k = per_dim[axis];
    if (const std::optional<int64_t> integer = integer_from(k)) {
      int64_t i = *integer;
      if (i < -size || i >= size) {
        throw py::index_error("index " + std::to_string(i) + " is out of range for axis " +
                              std::to_string(axis) + " of size " + std::to_string(size));
      }
      if (i < 0) i += size;
      if (size != 1) y = slice(y, axis, i, i + 1);
    } else if (py::isinstance<py::slice>(k)) {
      py::ssize_t start = 0, stop = 0, step = 0, length = 0;
      if (!py::reinterpret_borrow<py::slice>(k).compute(static_cast<py::ssize_t>(size), &start,
                                                        &stop, &step, &length)) {
        throw py::error_already_set();
      }
      if (step != 1) throw py::value_error("tensor slices take step 1 only");
      if (length != size) y = slice(y, axis, start, start + length);
      kept.push_back(length);
    } else {
      throw py::type_error("tensor indices must be ints, slices or ..., got " +
                           py::str(py::type::of(k)).cast<std::string>());
    }
  }
  if (kept.size() != static_cast<size_t>(rank)) y = reshape(y, Shape(kept));
  return y;
}

Variable matmul_any(const Variable& a, const Variable& b) {
  if (a.value().rank() == 2 && b.value().rank() == 2) return matmul(a, b);
  return batched_matmul(a, b);
}

Variable sum_over(const Variable& x, const py::object& axis, bool keepdims, bool mean_of) {
  if (axis.is_none()) {
    if (keepdims) throw py::value_error("keepdims needs an axis");
    return released([&] { return mean_of ? mean(x) : sum(x); });
  }
  const int a = axis.cast<int>();
  return released([&] { return mean_of ? mean(x, a, keepdims) : sum(x, a, keepdims); });
}

std::pair<int64_t, int64_t> pair_from(const py::object& value, const char* what) {
  if (PyLong_Check(value.ptr())) {
    const auto v = value.cast<int64_t>();
    return {v, v};
  }
  const auto seq = value.cast<std::vector<int64_t>>();
  if (seq.size() != 2) {
    throw py::value_error(std::string(what) + " must be an int or a pair of ints");
  }
  return {seq[0], seq[1]};
}

Variable optional_variable(const py::object& value) {
  return value.is_none() ? Variable() : as_variable(value);
}

// Arithmetic with broadcasting, pointwise functions, reductions and layout.
void bind_math_functions(py::module_& ops) {
  using V = const py::object&;
  ops.def(
      "matmul",
      [](V a, V b) {
        const Variable x = as_variable(a);
        const Variable y = operand_like(b, x);
        return released([&] { return matmul_any(x, y); });
      },
      py::arg("a"), py::arg("b"),
      "a @ b: (M, K) @ (K, N), or batched over leading dimensions (b may be (K, N), shared).");
  ops.def("add", [](V a, V b) {
    Variable x = as_variable(a);
    return binary(Binary::add, x, operand_like(b, x));
  });
  ops.def("sub", [](V a, V b) {
    Variable x = as_variable(a);
    return binary(Binary::sub, x, operand_like(b, x));
  });
  ops.def("mul", [](V a, V b) {
    Variable x = as_variable(a);
    return binary(Binary::mul, x, operand_like(b, x));
  });
  ops.def("div", [](V a, V b) {
    Variable x = as_variable(a);
    return binary(Binary::div, x, operand_like(b, x));
  });
  auto unary = [&](const char* name, Variable (*fn)(const Variable&), const char* doc) {
    ops.def(
        name,
        [fn](V x) {
          const Variable v = as_variable(x);
          return released([&] { return fn(v); });
        },
        py::arg("x"), doc);
  };
  unary("relu", &relu, "max(x, 0).");
  unary("gelu", &gelu, "GELU, the erf form.");
  unary("gelu_tanh", &gelu_tanh, "GELU, the tanh approximation (GPT-2's).");
  unary("silu", &silu, "x * sigmoid(x).");
  unary("sigmoid", &sigmoid, "1 / (1 + exp(-x)).");
  unary("tanh", &tanh, "tanh(x).");
  unary("exp", &exp, "e^x.");
  unary("log", &log, "The natural logarithm.");
  // axis as Keras's and the Tensor method's: the last one only.
  auto last_axis = [&](const char* name, Variable (*fn)(const Variable&), const char* doc) {
    ops.def(
        name,
        [fn, name](V x, int axis) {
          const Variable v = as_variable(x);
          if (normalized_axis(axis, v.value().rank(), name) != v.value().rank() - 1)
            throw py::value_error(std::string(name) + " is over the last axis only; permute first");
          return released([&] { return fn(v); });
        },
        py::arg("x"), py::arg("axis") = -1, doc);
  };
  last_axis("softmax", &softmax, "Softmax over the last axis (axis=-1).");
  last_axis("log_softmax", &log_softmax,
            "log(softmax(x)) over the last axis (axis=-1), computed stably.");
  unary("flatten", &flatten, "(N, ...) -> (N, product of the rest).");
  unary("global_avg_pool", &global_avg_pool, "(N, H, W, C) -> (N, C): the mean over H and W.");
  ops.def(
      "sum",
      [](V x, V axis, bool keepdims) { return sum_over(as_variable(x), axis, keepdims, false); },
      py::arg("x"), py::arg("axis") = py::none(), py::arg("keepdims") = false,
      "The sum of all elements (shape (), float32), or along one axis.");
  ops.def(
      "mean",
      [](V x, V axis, bool keepdims) { return sum_over(as_variable(x), axis, keepdims, true); },
      py::arg("x"), py::arg("axis") = py::none(), py::arg("keepdims") = false,
      "The mean of all elements (shape (), float32), or along one axis.");
}

void bind_shape_functions(py::module_& ops) {
  using V = const py::object&;
  ops.def(
      "reshape",
      [](V x, py::args shape) {
        const Variable v = as_variable(x);
        return reshape(v, resolved_shape(v, shape));
      },
      py::arg("x"), "The same elements under another shape (one dimension may be -1).");
  ops.def(
      "transpose",
      [](V x, int d0, int d1) {
        const Variable v = as_variable(x);
        return released([&] { return transpose(v, d0, d1); });
      },
      py::arg("x"), py::arg("dim0"), py::arg("dim1"), "Swaps two dimensions (a copy).");
  ops.def(
      "permute",
      [](V x, const std::vector<int>& order) {
        const Variable v = as_variable(x);
        return released([&] { return permute(v, order); });
      },
      py::arg("x"), py::arg("order"), "y.shape[i] == x.shape[order[i]] (a copy).");
  ops.def(
      "slice",
      [](V x, int axis, int64_t begin, int64_t end) {
        const Variable v = as_variable(x);
        return released([&] { return slice(v, axis, begin, end); });
      },
      py::arg("x"), py::arg("axis"), py::arg("begin"), py::arg("end"),
      "Elements [begin, end) of one axis.");
  ops.def(
      "split",
      [](V x, const std::vector<int64_t>& sizes, int axis) {
        const Variable v = as_variable(x);
        return released([&] { return split(v, axis, sizes); });
      },
      py::arg("x"), py::arg("sizes"), py::arg("axis"),
      "Pieces of the given sizes along an axis (they must add up to it).");
  ops.def(
      "concat",
      [](const py::sequence& parts, int axis) {
        std::vector<Variable> vs;
        for (const auto& p : parts) vs.push_back(as_variable(p));
        if (vs.empty()) throw py::value_error("concat needs at least one tensor");
        return released([&] { return concat(vs, axis); });
      },
      py::arg("tensors"), py::arg("axis") = 0, "Joins tensors along an axis.");
  ops.def(
      "cast",
      [](V x, V dtype) {
        const Variable v = as_variable(x);
        const DType d = dtype_from(dtype);
        return released([&] { return cast(v, d); });
      },
      py::arg("x"), py::arg("dtype"), "Converts the dtype; the gradient is converted back.");
}

// Layers as functions: linear, convolution, pooling, dropout, normalisation,
// attention, embedding.
void bind_layer_functions(py::module_& ops) {
  using V = const py::object&;
  ops.def(
      "linear",
      [](V x, V weight, V bias, V activation) {
        const Variable xv = as_variable(x), w = as_variable(weight), b = optional_variable(bias);
        LinearOptions options{.activation = activation_from(activation)};
        return released([&] { return linear(xv, w, b, options); });
      },
      py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(),
      py::arg("activation") = py::none(),
      "act(x @ weight.T + bias): x (..., in), weight (out, in), bias (out,) or None.");
  ops.def(
      "conv2d",
      [](V x, V weight, V bias, V stride, V padding, V activation) {
        const Variable xv = as_variable(x), w = as_variable(weight), b = optional_variable(bias);
        const auto [sh, sw] = pair_from(stride, "stride");
        const auto [ph, pw] = pair_from(padding, "padding");
        Conv2dOptions options{
            .geometry = {.stride_h = sh, .stride_w = sw, .pad_h = ph, .pad_w = pw},
            .activation = activation_from(activation)};
        return released([&] { return conv2d(xv, w, b, options); });
      },
      py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("activation") = py::none(),
      "Convolution of x (N, H, W, C) with weight (KH, KW, C, O), zero padding on each side.");
  auto pool = [&](const char* name,
                  Variable (*fn)(const Variable&, const kernels::Pool2dGeometry&)) {
    ops.def(
        name,
        [fn](V x, V size, V stride, V padding) {
          const Variable v = as_variable(x);
          const auto [kh, kw] = pair_from(size, "size");
          const auto [sh, sw] = stride.is_none() ? std::pair{kh, kw} : pair_from(stride, "stride");
          const auto [ph, pw] = pair_from(padding, "padding");
          kernels::Pool2dGeometry g{kh, kw, sh, sw, ph, pw};
          return released([&] { return fn(v, g); });
        },
        py::arg("x"), py::arg("size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
        "Pooling over windows of x (N, H, W, C); the stride defaults to the window.");
  };
  pool("max_pool2d", &max_pool2d);
  pool("avg_pool2d", &avg_pool2d);
  ops.def(
      "dropout",
      [](V x, float p, bool training) {
        if (p < 0.0f || p >= 1.0f)
          throw py::value_error("dropout: p must be in [0, 1), got " + std::to_string(p));
        const Variable v = as_variable(x);
        return released([&] { return dropout(v, p, training, thread_generator()); });
      },
      py::arg("x"), py::arg("p"), py::arg("training") = true,
      "Inverted dropout; the mask comes from the thread's generator (seeded per step and "
      "replica).");
  ops.def(
      "layer_norm",
      [](V x, V gamma, V beta, float eps) {
        const Variable xv = as_variable(x), g = as_variable(gamma), b = as_variable(beta);
        return released([&] { return layer_norm(xv, g, b, eps); });
      },
      py::arg("x"), py::arg("gamma"), py::arg("beta"), py::arg("eps") = 1e-5f,
      "Normalises over the last dimension; gamma and beta (C,) float32.");
  ops.def(
      "rms_norm",
      [](V x, V gamma, float eps) {
        const Variable xv = as_variable(x), g = as_variable(gamma);
        return released([&] { return rms_norm(xv, g, eps); });
      },
      py::arg("x"), py::arg("gamma"), py::arg("eps") = 1e-6f,
      "x / rms(x) * gamma over the last dimension.");
}

void bind_attention_functions(py::module_& ops) {
  using V = const py::object&;
  ops.def(
      "attention",
      [](V q, V k, V v, bool causal, float dropout_p, bool training, float scale_by) {
        const Variable qv = as_variable(q), kv = as_variable(k), vv = as_variable(v);
        AttentionOptions options{
            .causal = causal,
            .dropout = dropout_p,
            .training = training,
            .compute_dtype = qv.dtype() == DType::bf16 ? DType::bf16 : DType::f32,
            .scale = scale_by};
        return released([&] { return attention(qv, kv, vv, options, &thread_generator()); });
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("causal") = true, py::arg("dropout") = 0.0f,
      py::arg("training") = false, py::arg("scale") = 0.0f,
      "Fused scaled dot-product attention: q (B, H, T, D), k and v (B, H, S, D) -> (B, H, T, D); "
      "scale 0 means 1/sqrt(D).");
  ops.def(
      "attention_packed",
      [](V qkv, bool causal, float dropout_p, bool training, float scale_by) {
        const Variable packed = as_variable(qkv);
        AttentionOptions options{
            .causal = causal,
            .dropout = dropout_p,
            .training = training,
            .compute_dtype = packed.dtype() == DType::bf16 ? DType::bf16 : DType::f32,
            .scale = scale_by};
        return released([&] { return attention_packed(packed, options, &thread_generator()); });
      },
      py::arg("qkv"), py::arg("causal") = true, py::arg("dropout") = 0.0f,
      py::arg("training") = false, py::arg("scale") = 0.0f,
      "Self-attention on q, k, v packed as qkv (3, B, H, T, D) -> (B, H, T, D): attention() on "
      "the thirds, which are views (no copies, one gradient tensor).");
  ops.def(
      "embedding",
      [](V weight, V indices) {
        const Variable w = as_variable(weight);
        const Tensor i = indices_from(indices, "embedding indices");
        return released([&] { return embedding(w, i); });
      },
      py::arg("weight"), py::arg("indices"),
      "Rows of weight (V, D) gathered by int32 indices (int64 ones are converted).");
}

// Per-example losses, shape (N,): what a training step differentiates.
void bind_loss_functions(py::module_& ops) {
  using V = const py::object&;
  ops.def(
      "softmax_cross_entropy",
      [](V logits, V labels, V ignore_index, double smoothing) {
        const Variable l = as_variable(logits);
        const Tensor y = indices_from(labels, "cross-entropy labels");
        CrossEntropyOptions options;
        if (!ignore_index.is_none()) options.ignore_index = ignore_index.cast<int32_t>();
        options.label_smoothing = smoothing;
        return released([&] { return softmax_cross_entropy_per_example(l, y, options); });
      },
      py::arg("logits"), py::arg("labels"), py::arg("ignore_index") = py::none(),
      py::arg("label_smoothing") = 0.0,
      "Per-example softmax cross-entropy (N,) of logits (N, ..., K) against int32 labels (N, "
      "...).");
  ops.def(
      "binary_cross_entropy",
      [](V logits, V targets) {
        const Variable l = as_variable(logits);
        const Tensor t = as_variable(targets, DType::f32).value();
        return released([&] { return binary_cross_entropy_with_logits_per_example(l, t); });
      },
      py::arg("logits"), py::arg("targets"), "Per-example binary cross-entropy with logits (N,).");
  ops.def(
      "mean_squared_error",
      [](V predictions, V targets) {
        const Variable p = as_variable(predictions);
        const Tensor t = as_variable(targets, DType::f32).value();
        return released([&] { return mean_squared_error_per_example(p, t); });
      },
      py::arg("predictions"), py::arg("targets"), "Per-example mean squared error (N,).");
  ops.def(
      "mean_absolute_error",
      [](V predictions, V targets) {
        const Variable p = as_variable(predictions);
        const Tensor t = as_variable(targets, DType::f32).value();
        return released([&] { return mean_absolute_error_per_example(p, t); });
      },
      py::arg("predictions"), py::arg("targets"), "Per-example mean absolute error (N,).");
}

// a OP b on the tensors' values as numpy arrays.
py::object compare(const py::object& a, const py::object& b, const char* op) {
  const py::module_ np = py::module_::import("numpy");
  return np.attr("asarray")(a).attr(op)(np.attr("asarray")(b));
}

// Comparisons give numpy bool arrays, as numpy computes them (tandem has no
// bool dtype): masks, and predicates such as Dataset.filter's (y == 1
// compared identities before: always False). Without gradients. A tensor's
// hash stays its identity's; its truth needs one element (numpy's and
// PyTorch's rule; len() gave it before: tensor([0.0]) was True).
void add_comparisons(py::class_<Variable>& cls) {
  using V = const py::object&;
  cls.def("__eq__", [](V a, V b) { return compare(a, b, "__eq__"); })
      .def("__ne__", [](V a, V b) { return compare(a, b, "__ne__"); })
      .def("__lt__", [](V a, V b) { return compare(a, b, "__lt__"); })
      .def("__le__", [](V a, V b) { return compare(a, b, "__le__"); })
      .def("__gt__", [](V a, V b) { return compare(a, b, "__gt__"); })
      .def("__ge__", [](V a, V b) { return compare(a, b, "__ge__"); })
      .def("__hash__", [](V a) { return py::hash(py::int_(reinterpret_cast<intptr_t>(a.ptr()))); })
      .def("__bool__", [](const Variable& a) {
        if (a.value().numel() != 1) {
          throw py::value_error("the truth value of a tensor of " +
                                std::to_string(a.value().numel()) +
                                " elements is ambiguous; use .numpy().any() or .all()");
        }
        return to_numpy(a.value()).attr("item")().cast<bool>();
      });
}

}  // namespace

void add_tensor_methods(py::class_<Variable>& cls) {
  using V = const py::object&;
  add_comparisons(cls);
  cls.def("__add__",
          [](const Variable& a, V b) { return binary(Binary::add, a, operand_like(b, a)); })
      .def("__radd__",
           [](const Variable& a, V b) { return binary(Binary::add, operand_like(b, a), a); })
      .def("__sub__",
           [](const Variable& a, V b) { return binary(Binary::sub, a, operand_like(b, a)); })
      .def("__rsub__",
           [](const Variable& a, V b) { return binary(Binary::sub, operand_like(b, a), a); })
      .def("__mul__",
           [](const Variable& a, V b) {
             if (PyFloat_Check(b.ptr()) || PyLong_Check(b.ptr())) {
               const float f = b.cast<float>();
               return released([&] { return scale(a, f); });
             }
             return binary(Binary::mul, a, operand_like(b, a));
           })
      .def("__rmul__",
           [](const Variable& a, V b) { return binary(Binary::mul, operand_like(b, a), a); })
      .def("__truediv__",
           [](const Variable& a, V b) { return binary(Binary::div, a, operand_like(b, a)); })
      .def("__rtruediv__",
           [](const Variable& a, V b) { return binary(Binary::div, operand_like(b, a), a); })
      .def("__neg__", [](const Variable& a) { return released([&] { return scale(a, -1.0f); }); })

      .def("__pow__",
           [](const Variable& a, int exponent) {
             if (exponent != 2)
               throw py::value_error("tensor ** n supports n = 2 only (use ops.exp/log)");
             return released([&] { return mul(a, a); });
           })
      .def("__matmul__",
           [](const Variable& a, V b) {
             const Variable y = operand_like(b, a);
             return released([&] { return matmul_any(a, y); });
           })
      .def("__rmatmul__",
           [](const Variable& a, V b) {
             const Variable x = operand_like(b, a);
             return released([&] { return matmul_any(x, a); });
           })
      .def("__getitem__", &index)
      .def(
          "reshape",
          [](const Variable& x, py::args shape) { return reshape(x, resolved_shape(x, shape)); },
          "The same elements under another shape (one dimension may be -1).")
      .def("transpose", [](const Variable& x, int d0,
                           int d1) { return released([&] { return transpose(x, d0, d1); }); })
      .def("permute",
           [](const Variable& x, py::args order) {
             std::vector<int> dims;
             py::object spec = order.size() == 1 && !PyLong_Check(order[0].ptr())
                                   ? py::object(order[0])
                                   : py::object(order);
             for (const auto& d : spec) dims.push_back(d.cast<int>());
             return released([&] { return permute(x, dims); });
           })
      .def(
          "sum",
          [](const Variable& x, V axis, bool keepdims) {
            return sum_over(x, axis, keepdims, false);
          },
          py::arg("axis") = py::none(), py::arg("keepdims") = false)
      .def(
          "mean",
          [](const Variable& x, V axis, bool keepdims) {
            return sum_over(x, axis, keepdims, true);
          },
          py::arg("axis") = py::none(), py::arg("keepdims") = false)
      .def("relu", [](const Variable& x) { return released([&] { return relu(x); }); })
      .def("exp", [](const Variable& x) { return released([&] { return exp(x); }); })
      .def("log", [](const Variable& x) { return released([&] { return log(x); }); })
      .def(
          "softmax",
          [](const Variable& x, int axis) {
            if (normalized_axis(axis, x.value().rank(), "softmax") != x.value().rank() - 1)
              throw py::value_error("softmax is over the last axis only; permute first");
            return released([&] { return softmax(x); });
          },
          py::arg("axis") = -1)
      .def("flatten", [](const Variable& x) { return flatten(x); })
      .def(
          "cast",
          [](const Variable& x, V dtype) {
            const DType d = dtype_from(dtype);
            return released([&] { return cast(x, d); });
          },
          py::arg("dtype"), "Converts the dtype, differentiably.");
}

void bind_ops(py::module_& m) {
  m.def("is_grad_enabled", &grad_enabled, "Whether ops on this thread record the graph.");
  m.def("set_grad_enabled", &set_grad_enabled, py::arg("enabled"));
  py::module_ ops = m.def_submodule("ops", "tandem's differentiable functions.");
  bind_math_functions(ops);
  bind_shape_functions(ops);
  bind_layer_functions(ops);
  bind_attention_functions(ops);
  bind_loss_functions(ops);
}

}  // namespace tandem::python
