// tandem.Tensor: numpy in and out (shared memory where the layout allows),
// the DLPack protocol, gradients. Operators and methods that compute are
// added by ops.cc (add_tensor_methods).
#include <dlpack/dlpack.h>
#include <atomic>
#include <bit>

#include <cstring>
#include <memory>
#include <utility>

#include "common.h"
#include "tandem/base/error.h"
#include "tandem/tensor/convert.h"

namespace tandem::python {

void add_tensor_methods(py::class_<Variable>& cls);

namespace {

std::string numpy_dtype_name(const py::dtype& dt) {
  return py::str(static_cast<const py::handle&>(dt)).cast<std::string>();
}

// The dtype a copy of an array of this numpy dtype takes by default: int32
// for every integer (tf.constant's choice; tandem's kernels take int32 labels
// and indices), int64 only when asked for.
DType default_dtype(const py::dtype& dt) {
  switch (dt.kind()) {
    case 'f':
      return dt.itemsize() == 2 ? DType::f16 : DType::f32;
    case 'b':
    case 'i':
      return DType::i32;
    case 'u':
      return dt.itemsize() == 1 ? DType::u8 : DType::i32;
    default:
      throw py::type_error("tandem.tensor: cannot make a tensor from numpy dtype " +
                           numpy_dtype_name(dt) + " (numbers only: float, int, uint8 or bool)");
  }
}

// Refuses values that an integer target cannot hold before numpy casts
// them (it wraps integers, 300 to uint8 44, and gives floats past the range
// any number): NaN and infinities, and values outside the range once
// truncated toward zero (the cast's rounding).
void check_fits(const py::array& array, DType target) {
  if (array.size() == 0 || (target != DType::i32 && target != DType::u8 && target != DType::i64))
    return;
  const char kind = array.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b') return;
  py::module_ np = py::module_::import("numpy");
  py::object values = array;
  if (kind == 'f') {
    if (!np.attr("isfinite")(array).attr("all")().cast<bool>()) {
      throw py::value_error(std::string("tandem.tensor: NaN or infinite values cannot be ") +
                            std::string(dtype_name(target)));
    }
    values = np.attr("trunc")(array);
  }
  // As Python ints (exact for every integer dtype; floats past 2^63 too).
  const py::int_ low(np.attr("min")(values).attr("item")());
  const py::int_ high(np.attr("max")(values).attr("item")());
  const auto [lowest, highest] = target == DType::u8 ? std::pair<py::int_, py::int_>(0, 255)
                                 : target == DType::i32
                                     ? std::pair<py::int_, py::int_>(INT32_MIN, INT32_MAX)
                                     : std::pair<py::int_, py::int_>(INT64_MIN, INT64_MAX);
  if (low < lowest || high > highest) {
    throw py::value_error(
        "tandem.tensor: values from " + py::repr(low).cast<std::string>() + " to " +
        py::repr(high).cast<std::string>() + " do not fit " + std::string(dtype_name(target)) +
        (target == DType::i32 ? " (tandem's labels and indices are int32; keep wider ones int64 "
                                "with dtype=\"int64\" or tandem.from_numpy)"
                              : ""));
  }
}

Device device_from(const py::handle& value) {
  if (value.is_none()) return current_device();
  if (!py::isinstance<py::str>(value)) {
    throw py::type_error("device must be a string such as \"cpu\" or \"cuda:0\", got " +
                         py::str(py::type::of(value)).cast<std::string>());
  }
  return parse_device(value.cast<std::string>());
}

// --- DLPack ---------------------------------------------------------------

struct DlpackExport {
  Tensor tensor;
  std::vector<int64_t> shape;
  DLManagedTensor managed{};
};

DLDataType dlpack_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return {kDLFloat, 32, 1};
    case DType::f16:
      return {kDLFloat, 16, 1};
    case DType::bf16:
      return {kDLBfloat, 16, 1};
    case DType::i32:
      return {kDLInt, 32, 1};
    case DType::u8:
      return {kDLUInt, 8, 1};
    case DType::i64:
      return {kDLInt, 64, 1};
  }
  throw InvalidArgument("unknown dtype");
}

DType dtype_of_dlpack(DLDataType t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return DType::f32;
    if (t.code == kDLFloat && t.bits == 16) return DType::f16;
    if (t.code == kDLBfloat && t.bits == 16) return DType::bf16;
    if (t.code == kDLInt && t.bits == 32) return DType::i32;
    if (t.code == kDLUInt && t.bits == 8) return DType::u8;
    if (t.code == kDLInt && t.bits == 64) return DType::i64;
  }
  throw py::type_error("tandem.from_dlpack: dtype (code " + std::to_string(t.code) + ", " +
                       std::to_string(t.bits) + " bits, " + std::to_string(t.lanes) +
                       " lanes) is not one of tandem's (float32, float16, bfloat16, int32, "
                       "uint8, int64); convert it first (e.g. .to(torch.float32))");
}

py::capsule to_dlpack(const Variable& v) {
  const Tensor& t = v.value();
  if (t.device().kind != DeviceKind::cpu) synchronize_all(t.device());
  auto exported = std::make_unique<DlpackExport>();
  exported->tensor = t;
  exported->shape = t.shape().to_vector();
  DLTensor& dl = exported->managed.dl_tensor;
  dl.data = t.numel() == 0 ? nullptr : t.device_data();
  dl.device = t.device().kind == DeviceKind::cpu ? DLDevice{kDLCPU, 0}
                                                 : DLDevice{kDLCUDA, t.device().index};
  dl.ndim = t.rank();
  dl.dtype = dlpack_dtype(t.dtype());
  dl.shape = exported->shape.data();
  dl.strides = nullptr;  // compact row-major
  dl.byte_offset = 0;
  exported->managed.manager_ctx = exported.get();
  exported->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<DlpackExport*>(self->manager_ctx);
  };
  DLManagedTensor* managed = &exported.release()->managed;
  // A capsule nobody consumed still owns the tensor; a consumer renames it
  // "used_dltensor" and calls the deleter itself.
  return py::capsule(managed, "dltensor", [](PyObject* capsule) {
    if (PyCapsule_IsValid(capsule, "dltensor") == 0) return;
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (m != nullptr && m->deleter != nullptr) m->deleter(m);
  });
}

Variable from_dlpack(const py::object& source) {
  py::object capsule = source;
  if (py::hasattr(source, "__dlpack__")) capsule = source.attr("__dlpack__")();
  if (PyCapsule_IsValid(capsule.ptr(), "dltensor") == 0) {
    throw py::type_error(
        "tandem.from_dlpack needs an object with __dlpack__ (a numpy array, a PyTorch tensor, "
        "...) or an unused \"dltensor\" capsule, got " +
        py::str(py::type::of(source)).cast<std::string>());
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  const DLTensor& dl = managed->dl_tensor;
  const DType dtype = dtype_of_dlpack(dl.dtype);
  std::vector<int64_t> dims(dl.shape, dl.shape + dl.ndim);
  const Shape shape(dims);
  if (dl.strides != nullptr) {
    int64_t expected = 1;
    for (int i = dl.ndim - 1; i >= 0; --i) {
      if (dims[i] != 1 && dl.strides[i] != expected) {
        throw py::value_error("tandem.from_dlpack: the tensor " + shape.to_string() +
                              " is not contiguous (row-major); make it so first "
                              "(.contiguous() or numpy.ascontiguousarray)");
      }
      expected *= dims[i];
    }
  }
  // As from_numpy: the kernels read whole elements (and vectors of them).
  const auto address = reinterpret_cast<uintptr_t>(static_cast<char*>(dl.data) + dl.byte_offset);
  if (address % dtype_size(dtype) != 0) {
    throw py::value_error(
        "tandem.from_dlpack: the tensor's elements are not aligned in memory; "
        "copy it with tandem.tensor");
  }
  Device device;
  switch (dl.device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      device = cpu_device(0);
      break;
    case kDLCUDA:
      device = Device{DeviceKind::cuda, dl.device.device_id};
      break;
    default:
      throw py::value_error("tandem.from_dlpack: device type " +
                            std::to_string(dl.device.device_type) +
                            " is not one tandem uses (CPU or CUDA)");
  }
  // From here the tensor owns the producer's memory: the capsule is used.
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  PyCapsule_SetDestructor(capsule.ptr(), nullptr);
  std::shared_ptr<const void> owner(managed, [](const void* p) {
    auto* m = static_cast<DLManagedTensor*>(const_cast<void*>(p));
    if (m->deleter == nullptr) return;
    // Producers' deleters may release Python objects (numpy's does).
    if (Py_IsInitialized() == 0) return;
    py::gil_scoped_acquire gil;
    m->deleter(m);
  });
  void* data = static_cast<char*>(dl.data) + dl.byte_offset;
  return Variable(Tensor::wrap(data, shape, dtype, device, std::move(owner)));
}

std::string describe(const Variable& v) {
  if (!v.defined()) return "tandem.Tensor(undefined)";
  const Tensor& t = v.value();
  std::string out = "tandem.Tensor(";
  if (t.numel() <= 64) {
    py::object values = py::module_::import("numpy").attr("array2string")(
        to_numpy(t), py::arg("separator") = ", ", py::arg("prefix") = "tandem.Tensor(");
    out += values.cast<std::string>() + ", ";
  }
  out += "shape=" + t.shape().to_string() + ", dtype=" + std::string(dtype_name(t.dtype()));
  if (t.device() != cpu_device(0)) out += ", device=" + t.device().to_string();
  if (v.requires_grad()) out += ", requires_grad=True";
  return out + ")";
}

}  // namespace

// --- Conversions (common.h) -------------------------------------------------

std::shared_ptr<py::object> keep_python(py::object object) {
  return std::shared_ptr<py::object>(new py::object(std::move(object)), [](py::object* kept) {
    if (Py_IsInitialized() == 0) return;  // the interpreter is gone: nothing to release
    py::gil_scoped_acquire gil;
    delete kept;
  });
}

std::optional<DType> dtype_of_numpy(const py::dtype& dt) {
  // Elements in the other byte order are not tandem's as they are.
  const std::string order = py::str(dt.attr("byteorder"));
  const char native = std::endian::native == std::endian::little ? '<' : '>';
  if (order != "=" && order != "|" && order != std::string(1, native)) return std::nullopt;
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  if (kind == 'f' && size == 4) return DType::f32;
  if (kind == 'f' && size == 2) return DType::f16;
  if (kind == 'i' && size == 4) return DType::i32;
  if (kind == 'u' && size == 1) return DType::u8;
  if (kind == 'i' && size == 8) return DType::i64;
  return std::nullopt;
}

kernels::Activation activation_from(const py::object& value) {
  if (value.is_none()) return kernels::Activation::none;
  return kernels::parse_activation(value.cast<std::string>());
}

namespace {
std::atomic<precision::Policy> python_global_policy{precision::Policy::float32};
}  // namespace

precision::Policy global_policy() {
  return python_global_policy.load();
}

void set_global_policy(precision::Policy policy) {
  python_global_policy.store(policy);
}

precision::Policy policy_from(const py::object& value) {
  if (value.is_none()) return global_policy();
  return precision::parse_policy(value.cast<std::string>());
}

DType dtype_from(const py::handle& value) {
  if (py::isinstance<DType>(value)) return value.cast<DType>();
  if (py::isinstance<py::str>(value)) return parse_dtype(value.cast<std::string>());
  py::module_ np = py::module_::import("numpy");
  if (py::isinstance<py::dtype>(value) || py::isinstance<py::type>(value)) {
    const py::dtype dt = np.attr("dtype")(value);
    if (auto d = dtype_of_numpy(dt)) return *d;
    throw py::type_error("dtype " + numpy_dtype_name(dt) +
                         " is not one of tandem's (float32, float16, bfloat16, int32, uint8, "
                         "int64)");
  }
  throw py::type_error(
      "dtype must be a name (\"float32\", \"bf16\", ...), a tandem dtype or a "
      "numpy dtype, got " +
      py::str(py::type::of(value)).cast<std::string>());
}

std::optional<py::dtype> numpy_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return py::dtype("float32");
    case DType::f16:
      return py::dtype("float16");
    case DType::i32:
      return py::dtype("int32");
    case DType::u8:
      return py::dtype("uint8");
    case DType::i64:
      return py::dtype("int64");
    case DType::bf16:
      return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::string> unshareable(const py::array& array) {
  if (!dtype_of_numpy(array.dtype())) {
    return "numpy dtype " + numpy_dtype_name(array.dtype()) +
           " is not one of tandem's (float32, float16, int32, uint8, int64, in this machine's "
           "byte order)";
  }
  if ((array.flags() & py::array::c_style) == 0)
    return std::string("the array is not C-contiguous (numpy.ascontiguousarray(a) makes it so)");
  // Kernels read whole elements: an array whose elements straddle their
  // alignment (a view at an odd byte offset) is undefined behaviour there.
  if (!array.attr("flags").attr("aligned").cast<bool>())
    return std::string("the array's elements are not aligned");
  // tandem writes to the tensors it holds (and numpy() hands them back
  // writable): a read-only array (a memmap opened "r", bytes) would be
  // written through, or crash.
  if (!array.writeable())
    return std::string("the array is read-only and a tensor shares it writable");
  return std::nullopt;
}

Tensor tensor_sharing(const py::array& array) {
  if (const std::optional<std::string> why = unshareable(array))
    throw py::value_error("tandem.from_numpy: " + *why + "; use tandem.tensor(a) to copy it");
  std::vector<int64_t> dims(array.shape(), array.shape() + array.ndim());
  void* data = const_cast<void*>(array.data());
  return Tensor::wrap(data, Shape(dims), *dtype_of_numpy(array.dtype()), cpu_device(0),
                      keep_python(py::reinterpret_borrow<py::object>(array)));
}

Tensor tensor_copying(const py::handle& data, std::optional<DType> dtype) {
  py::module_ np = py::module_::import("numpy");
  py::array array = np.attr("asarray")(data);
  const DType target = dtype ? *dtype : default_dtype(array.dtype());
  check_fits(array, target);
  if (array.dtype().kind() == 'O' || array.dtype().kind() == 'U' || array.dtype().kind() == 'S') {
    throw py::type_error("tandem.tensor: cannot make a tensor from numpy dtype " +
                         numpy_dtype_name(array.dtype()) + " (numbers only)");
  }
  // numpy converts to the nearest dtype it has; bf16 goes through float32.
  // (asarray with order "C", not ascontiguousarray, which makes scalars 1-d.)
  const py::dtype staging = numpy_dtype(target).value_or(py::dtype("float32"));
  py::array contiguous =
      np.attr("asarray")(array, py::arg("dtype") = staging, py::arg("order") = "C");
  std::vector<int64_t> dims(contiguous.shape(), contiguous.shape() + contiguous.ndim());
  const DType staged = target == DType::bf16 ? DType::f32 : target;
  Tensor t = Tensor::empty(Shape(dims), staged, cpu_device(0));
  if (t.nbytes() > 0) std::memcpy(t.raw_data(), contiguous.data(), t.nbytes());
  return t.to(target);
}

py::array to_numpy(const Tensor& tensor) {
  const Tensor host = tensor.on_host();
  std::vector<py::ssize_t> shape(host.shape().dims().begin(), host.shape().dims().end());
  const auto dt = numpy_dtype(host.dtype());
  if (!dt) {  // bf16: a float32 copy
    const Tensor f32 = host.to(DType::f32);
    py::array copy(py::dtype("float32"), shape);
    if (f32.nbytes() > 0) std::memcpy(copy.mutable_data(), f32.raw_data(), f32.nbytes());
    return copy;
  }
  auto* keeper = new Tensor(host);
  py::capsule base(keeper, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(*dt, shape, {}, host.numel() == 0 ? nullptr : host.raw_data(), base);
}

Variable as_variable(const py::handle& value, std::optional<DType> dtype) {
  if (py::isinstance<Variable>(value)) {
    const auto& v = value.cast<const Variable&>();
    if (!v.defined()) throw py::value_error("an undefined tensor cannot be an operand");
    return v;
  }
  if (PyFloat_Check(value.ptr()) || PyLong_Check(value.ptr()) || PyBool_Check(value.ptr())) {
    const DType d = dtype.value_or(PyFloat_Check(value.ptr()) ? DType::f32 : DType::i32);
    // Through float only into a floating dtype: an int past 2^24 lost its
    // last bits on the way (embedding row 16777217 read 16777216).
    if (is_floating(d)) return Variable(Tensor::full(Shape{}, value.cast<float>(), d));
    return Variable(tensor_copying(value, d));
  }
  if (py::isinstance<py::str>(value) || value.is_none()) {
    throw py::type_error("expected a tandem.Tensor, a numpy array or a number, got " +
                         py::str(py::type::of(value)).cast<std::string>());
  }
  return Variable(tensor_copying(value, dtype));
}

Tensor indices_from(const py::handle& value, const char* what) {
  // Floats are not indices (labels 0.9 and 1.9 were read as 0 and 1).
  const bool floating = py::isinstance<Variable>(value)
                            ? is_floating(value.cast<const Variable&>().dtype())
                            : py::module_::import("numpy")
                                      .attr("asarray")(value)
                                      .attr("dtype")
                                      .attr("kind")
                                      .cast<std::string>() == "f";
  if (floating) {
    throw py::type_error(std::string(what) +
                         ": labels and indices must be integers (int32 or int64), got floats");
  }
  const Tensor t = as_variable(value, DType::i32).value();
  if (t.dtype() != DType::i64) return t;
  const Tensor host = t.on_host();
  const int64_t* v = host.data<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    if (v[i] < INT32_MIN || v[i] > INT32_MAX) {
      throw py::value_error(std::string(what) + ": int64 value " + std::to_string(v[i]) +
                            " at position " + std::to_string(i) +
                            " does not fit int32, the dtype of tandem's labels and indices");
    }
  }
  return t.to(DType::i32);
}

std::optional<int64_t> integer_from(const py::handle& value) {
  if (PyBool_Check(value.ptr()) || PyFloat_Check(value.ptr()) || !PyIndex_Check(value.ptr()))
    return std::nullopt;
  const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0) {
    throw py::value_error("integer " + py::str(index).cast<std::string>() +
                          " is out of int64's range");
  }
  return static_cast<int64_t>(v);
}

std::vector<int64_t> integers_from(const py::handle& value, const std::string& what) {
  if (const std::optional<int64_t> n = integer_from(value)) return {*n};
  if (!py::isinstance<py::sequence>(value) || py::isinstance<py::str>(value)) {
    throw py::type_error(what + " takes an int or a sequence of ints, got " +
                         py::str(py::type::of(value)).cast<std::string>());
  }
  std::vector<int64_t> out;
  for (const auto& d : value) {
    const std::optional<int64_t> n = integer_from(d);
    if (!n) {
      throw py::type_error(what + " takes ints, got " +
                           py::str(py::type::of(d)).cast<std::string>());
    }
    out.push_back(*n);
  }
  return out;
}

Shape shape_from(const py::handle& value) {
  return Shape(integers_from(value, "a shape"));
}

py::tuple shape_tuple(const Shape& shape) {
  py::tuple out(shape.rank());
  for (int i = 0; i < shape.rank(); ++i) out[i] = shape[i];
  return out;
}

// --- tandem.Tensor ------------------------------------------------------------

namespace {

// Shape, dtype and device; the autograd state (requires_grad, grad, leaf,
// backward, detach).
void add_tensor_state(py::class_<Variable>& cls) {
  cls.def_property_readonly(
         "shape", [](const Variable& v) { return shape_tuple(v.shape()); },
         "The dimensions, as a tuple.")
      .def_property_readonly("ndim", [](const Variable& v) { return v.value().rank(); })
      .def_property_readonly("dtype", [](const Variable& v) { return v.dtype(); })
      .def_property_readonly(
          "device", [](const Variable& v) { return v.value().device().to_string(); },
          "\"cpu:0\", \"cuda:0\", ...")
      .def("numel", [](const Variable& v) { return v.value().numel(); })
      .def("__len__",
           [](const Variable& v) {
             if (v.value().rank() == 0) throw py::type_error("len() of a 0-d tensor");
             return v.value().dim(0);
           })
      .def_property(
          "requires_grad", [](const Variable& v) { return v.requires_grad(); },
          [](Variable& v, bool on) {
            if (on && !is_floating(v.dtype())) {
              throw py::value_error("requires_grad needs a floating dtype, got " +
                                    std::string(dtype_name(v.dtype())));
            }
            if (!v.is_leaf()) {
              throw py::value_error(
                  "requires_grad can only be changed on a leaf (a tensor no op produced); use "
                  "detach() first");
            }
            v.set_requires_grad(on);
          },
          "Whether ops on this tensor record how to differentiate them.")
      .def_property_readonly("is_leaf", &Variable::is_leaf)
      .def_property(
          "grad",
          [](const Variable& v) -> py::object {
            if (!v.has_grad()) return py::none();
            return py::cast(Variable(v.grad()));
          },
          [](Variable& v, const py::object& value) {
            if (!value.is_none()) throw py::value_error("grad can only be set to None");
            v.zero_grad();
          },
          "The accumulated gradient of a leaf (None before backward); set to None to clear it.")
      .def_property("name", &Variable::name, &Variable::set_name)
      .def(
          "backward",
          [](const Variable& v, const py::object& gradient) {
            if (gradient.is_none()) {
              py::gil_scoped_release release;
              v.backward();
            } else {
              Tensor g = as_variable(gradient, v.dtype()).value();
              py::gil_scoped_release release;
              v.backward(g);
            }
          },
          py::arg("gradient") = py::none(), R"doc(
Back-propagates from this tensor: every leaf it depends on that requires a
gradient gets it added to .grad. Without `gradient` the tensor must have one
element (a loss). The graph is freed; a second backward through it raises.)doc")
      .def("detach", &Variable::detach, "The same values without history (no gradient).");
}

// The values elsewhere: numpy (shared), Python objects, other dtypes and
// devices, DLPack.
void add_tensor_conversions(py::class_<Variable>& cls) {
  cls.def(
         "numpy",
         [](const Variable& v) {
           // The array may be written: copies layers derived from the value
           // (mixed precision's bf16 weights) are made anew at their next
           // use. (A write through an array kept across forward calls needs
           // mark_modified().)
           if (v.requires_grad()) v.mark_modified();
           return to_numpy(v.value());
         },
         "A numpy array sharing this tensor's memory (a float32 copy for bfloat16, a host copy "
         "for a GPU tensor).")
      .def("mark_modified", &Variable::mark_modified,
           "Says that the tensor's memory was written (through a numpy() array kept across "
           "forward calls): layers recompute what they derived from it (the bf16 copy of a "
           "weight under mixed precision).")
      .def(
          "__array__",
          [](const Variable& v, const py::object& dtype) {
            py::array a = to_numpy(v.value());
            if (dtype.is_none()) return py::object(a);
            return a.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none())
      .def("item",
           [](const Variable& v) -> py::object {
             if (v.value().numel() != 1) {
               throw py::value_error("item() needs a one-element tensor, got shape " +
                                     v.shape().to_string());
             }
             return to_numpy(v.value()).attr("reshape")(-1)[py::int_(0)].attr("item")();
           })
      .def("tolist", [](const Variable& v) { return to_numpy(v.value()).attr("tolist")(); })
      .def(
          "to",
          [](const Variable& v, const py::object& target) {
            if (py::isinstance<py::str>(target)) {
              const std::string text = target.cast<std::string>();
              if (text.rfind("cpu", 0) == 0 || text.rfind("cuda", 0) == 0) {
                return Variable(v.value().to(parse_device(text)));
              }
            }
            return Variable(v.value().to(dtype_from(target)));
          },
          py::arg("target"),
          "A copy in another dtype (\"bfloat16\", tandem.float16, ...) or on another device "
          "(\"cpu:0\", \"cuda:0\"); itself when already so. Not differentiable: use "
          "tandem.ops.cast for that.")
      .def("clone", [](const Variable& v) { return Variable(v.value().clone()); })
      .def("data_ptr",
           [](const Variable& v) {
             return reinterpret_cast<uintptr_t>(v.value().numel() == 0 ? nullptr
                                                                       : v.value().device_data());
           })
      .def("__repr__", &describe)
      .def(
          "__dlpack__", [](const Variable& v, const py::object&) { return to_dlpack(v); },
          py::arg("stream") = py::none(),
          "A DLPack capsule sharing this tensor's memory (the consumer keeps it alive).")
      .def("__dlpack_device__", [](const Variable& v) {
        const Device d = v.value().device();
        return d.kind == DeviceKind::cpu ? py::make_tuple(static_cast<int>(kDLCPU), 0)
                                         : py::make_tuple(static_cast<int>(kDLCUDA), d.index);
      });
}

}  // namespace

void bind_tensor(py::module_& m) {
  py::enum_<DType>(m, "dtype",
                   "Element types: float32, bfloat16, float16, int32, uint8, int64 (int64 is "
                   "stored, copied and converted; ops take int32 labels and indices, converting "
                   "int64 ones that fit).")
      .value("float32", DType::f32)
      .value("bfloat16", DType::bf16)
      .value("float16", DType::f16)
      .value("int32", DType::i32)
      .value("uint8", DType::u8)
      .value("int64", DType::i64)
      .def_property_readonly("itemsize", [](DType d) { return dtype_size(d); })
      .def_property_readonly("is_floating_point", [](DType d) { return is_floating(d); });

  py::class_<Variable> cls(m, "Tensor", R"doc(
An n-dimensional array on a device, with its gradient (PyTorch's model: one
type for values, parameters and results of differentiable ops).

Tensor(data, dtype=None, requires_grad=False, device=None) copies `data`
(numpy arrays, nested lists, numbers); tandem.from_numpy shares an array's
memory instead. Images are channels-last (N, H, W, C). Ops on tensors that
require gradients record how to differentiate them; backward() computes the
gradients of the leaves (tensor.grad).

numpy(): float32, float16, int32, uint8 and int64 tensors give a numpy array
that shares their memory; bfloat16 (numpy has no such type) gives a float32
copy.
The DLPack protocol (__dlpack__, __dlpack_device__) shares memory with
numpy.from_dlpack and torch.from_dlpack in every dtype.)doc");
  cls.def(py::init([](const py::object& data, const py::object& dtype, bool requires_grad,
                      const py::object& device) {
            Tensor t = tensor_copying(
                data, dtype.is_none() ? std::nullopt : std::optional<DType>(dtype_from(dtype)));
            if (requires_grad && !is_floating(t.dtype())) {
              throw py::value_error("requires_grad needs a floating dtype, got " +
                                    std::string(dtype_name(t.dtype())));
            }
            return Variable(t.to(device_from(device)), requires_grad);
          }),
          py::arg("data"), py::arg("dtype") = py::none(), py::arg("requires_grad") = false,
          py::arg("device") = py::none());
  add_tensor_state(cls);
  add_tensor_conversions(cls);
  add_tensor_methods(cls);
  // numpy defers to the tensor's reflected operators (array @ tensor is the
  // tensor's __rmatmul__, recorded for autograd) instead of converting it.
  cls.attr("__array_ufunc__") = py::none();

  m.def(
      "from_numpy",
      [](const py::array& array, bool requires_grad) {
        Tensor t = tensor_sharing(array);
        if (requires_grad && !is_floating(t.dtype())) {
          throw py::value_error("requires_grad needs a floating dtype");
        }
        return Variable(t, requires_grad);
      },
      py::arg("array"), py::arg("requires_grad") = false,
      "A tensor sharing a C-contiguous numpy array's memory (float32, float16, int32, uint8, "
      "int64): "
      "writes through either show in both. Other arrays: tandem.tensor copies.");
  m.def("from_dlpack", &from_dlpack, py::arg("source"),
        "A tensor sharing the memory of any DLPack producer (torch tensors, numpy arrays, ...): "
        "contiguous, of a tandem dtype.");
  m.def("cuda_built", &cuda_built, "Whether this build has the CUDA back end.");
  m.def("cuda_device_count", &cuda_device_count);
  m.def("virtual_cpu_device_count", &virtual_cpu_device_count,
        "The virtual CPU devices replicas run on (one per core by default).");
  m.def("set_virtual_cpu_device_count", &set_virtual_cpu_device_count, py::arg("count"));
}

}  // namespace tandem::python
