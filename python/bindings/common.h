#pragma once
// What the binding files share: the conversions between Python values and
// tandem's tensors, and each file's registration function (module.cc calls
// them in order). Python's tandem.Tensor is the C++ Variable: a value with
// its gradient and history, as a PyTorch tensor is.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/autograd/variable.h"
#include "tandem/kernels/activation.h"
#include "tandem/nn/module.h"
#include "tandem/precision/policy.h"
#include "tandem/tensor/tensor.h"

namespace tandem::python {

namespace py = pybind11;

// Registration, one per binding file.
void bind_errors(py::module_& m);
void bind_tensor(py::module_& m);
void bind_ops(py::module_& m);
void bind_nn(py::module_& m);
void bind_data(py::module_& m);
void bind_train(py::module_& m);
void bind_engine(py::module_& m);

// Labels or indices: an int64 tensor is converted to int32 (the kernels'
// type), refusing a value outside it with a ValueError naming `what`; other
// values as as_variable(value, int32).
Tensor indices_from(const py::handle& value, const char* what);

// A dtype from a name ("float32", "f32", "bf16", ...), a tandem.dtype, or a
// numpy dtype; TypeError for anything else, ValueError for an unknown name.
DType dtype_from(const py::handle& value);

// The numpy dtype holding a tandem dtype's elements as they are; nullopt
// for bf16, which numpy lacks.
std::optional<py::dtype> numpy_dtype(DType dtype);

// Why a numpy array's memory cannot be shared as a tensor's (a dtype
// tandem lacks or in the other byte order, not C-contiguous, misaligned,
// read-only), or nullopt when it can.
std::optional<std::string> unshareable(const py::array& array);
// A tensor sharing the array's memory (the array is kept alive by the
// tensor); ValueError naming what unshareable() says otherwise.
Tensor tensor_sharing(const py::array& array);

// A tensor copying any array-like (nested lists, scalars, arrays of any
// layout) into `dtype` (default: float32 for floating values, int32 for
// integers and booleans; int64 values must fit in int32).
Tensor tensor_copying(const py::handle& data, std::optional<DType> dtype);

// A numpy array sharing the tensor's memory (f32, f16, i32, u8); bf16 is
// copied into float32. The array keeps the tensor's memory alive.
py::array to_numpy(const Tensor& tensor);

// An operand of an op: a tandem.Tensor as it is, anything else (numpy
// arrays, lists, Python numbers) as a constant tensor without gradient, in
// `dtype` when given.
Variable as_variable(const py::handle& value, std::optional<DType> dtype = std::nullopt);

// A Python object held by C++ (a callback, a module, an array): the last
// reference may go on a thread without the GIL (a replica's, the pipeline's),
// so the release takes it (and is skipped once the interpreter is gone).
std::shared_ptr<py::object> keep_python(py::object object);
// A module held from C++ with its Python object alive as long: a Python
// subclass's forward lives in that object (once it was collected, C++
// called a pure virtual function).
std::shared_ptr<nn::Module> held_with_python(py::object module);

// tandem's dtype for a numpy dtype whose elements it shares as they are
// (float32, float16, int32, uint8); nullopt for the others.
std::optional<DType> dtype_of_numpy(const py::dtype& dt);

// A fused activation by name ("relu", ...); None is none.
kernels::Activation activation_from(const py::object& value);

// Keras's global policy (tandem.set_global_policy; float32 until set): the
// Python package's default for the layers and models it builds. The C++
// library has none: every model names its policy.
precision::Policy global_policy();
void set_global_policy(precision::Policy policy);

// A precision policy by name; None is the global policy.
precision::Policy policy_from(const py::object& value);

// A shape from a Python int or sequence of ints.
Shape shape_from(const py::handle& value);
// A Python integer's value (int, numpy's integers: anything with
// __index__); nothing for bools, floats and anything else, so that 2.9 is
// refused rather than truncated. ValueError past int64's range.
std::optional<int64_t> integer_from(const py::handle& value);
// An int or a sequence of ints (as integer_from takes them); TypeError
// "<what> takes ..." otherwise.
std::vector<int64_t> integers_from(const py::handle& value, const std::string& what);
py::tuple shape_tuple(const Shape& shape);

}  // namespace tandem::python
