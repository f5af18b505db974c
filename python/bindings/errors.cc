// tandem's errors as Python exceptions. Each class derives from tandem.Error
// and from the built-in exception a Python user catches for that kind of
// problem, so `except ValueError` works as well as `except tandem.ShapeError`:
//   Error          RuntimeError   (the root; anything else tandem throws)
//   InvalidArgument, ShapeError   ValueError
//   IoError        OSError; FileNotFound also FileNotFoundError
//   CommError, PeerFailed, Diverged       (RuntimeError through Error)
//   Timeout        TimeoutError
//   NotImplemented NotImplementedError
// and a value of the wrong type met inside a binding (pybind11's
// cast_error) is a TypeError. The message is tandem's one line, unchanged.
#include <cstring>

#include "common.h"
#include "tandem/base/error.h"

namespace tandem::python {
namespace {

py::object make_exception(py::module_& m, const char* name, py::tuple bases, const char* doc) {
  const std::string qualified = std::string("tandem.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr) throw py::error_already_set();
  py::object cls = py::reinterpret_steal<py::object>(type);
  m.attr(name) = cls;
  return cls;
}

// Whether an IoError says that a path does not exist (the readers' and
// loaders' wording, and strerror's ENOENT), for FileNotFoundError. Not "not
// found": a corrupt header's "key 'dtype' not found" is no missing file.
bool says_missing(const char* message) {
  for (const char* phrase :
       {"does not exist", "No such file", "no such file", "no file '", "no data specification '"}) {
    if (std::strstr(message, phrase) != nullptr) return true;
  }
  return false;
}

}  // namespace

void bind_errors(py::module_& m) {
  const py::object runtime = py::reinterpret_borrow<py::object>(PyExc_RuntimeError);
  const py::object error = make_exception(m, "Error", py::make_tuple(runtime),
                                          "The root of tandem's errors (a RuntimeError).");
  auto derived = [&](const char* name, PyObject* builtin, const char* doc) {
    py::tuple bases = builtin == nullptr
                          ? py::make_tuple(error)
                          : py::make_tuple(error, py::reinterpret_borrow<py::object>(builtin));
    return make_exception(m, name, bases, doc);
  };
  // Handles: the module's attributes own the classes.
  static py::handle invalid, shape, io, missing, comm, peer, timeout, diverged, not_implemented,
      root;
  root = error;
  invalid = derived("InvalidArgument", PyExc_ValueError, "A value outside what a call accepts.");
  shape = derived("ShapeError", PyExc_ValueError, "Shapes or dtypes that do not fit together.");
  io = derived("IoError", PyExc_OSError, "A file is missing, unreadable, truncated or malformed.");
  missing = make_exception(
      m, "FileNotFound",
      py::make_tuple(io, py::reinterpret_borrow<py::object>(PyExc_FileNotFoundError)),
      "A file or folder that does not exist.");
  comm = derived("CommError", nullptr, "A collective failed or the ranks disagreed.");
  peer = make_exception(m, "PeerFailed", py::make_tuple(comm),
                        "Another rank or replica failed; the message carries its error.");
  timeout = derived("Timeout", PyExc_TimeoutError, "A blocking call did not complete in time.");
  diverged = derived("Diverged", nullptr, "Training diverged (a non-finite loss).");
  not_implemented = derived("NotImplemented", PyExc_NotImplementedError,
                            "A combination that exists in principle but is not built.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      PyErr_SetString(invalid.ptr(), e.what());
    } catch (const ShapeError& e) {
      PyErr_SetString(shape.ptr(), e.what());
    } catch (const IoError& e) {
      PyErr_SetString(says_missing(e.what()) ? missing.ptr() : io.ptr(), e.what());
    } catch (const PeerFailed& e) {
      PyErr_SetString(peer.ptr(), e.what());
    } catch (const CommError& e) {
      PyErr_SetString(comm.ptr(), e.what());
    } catch (const Timeout& e) {
      PyErr_SetString(timeout.ptr(), e.what());
    } catch (const Diverged& e) {
      PyErr_SetString(diverged.ptr(), e.what());
    } catch (const NotImplemented& e) {
      PyErr_SetString(not_implemented.ptr(), e.what());
    } catch (const Error& e) {
      PyErr_SetString(root.ptr(), e.what());
    } catch (const py::cast_error& e) {
      // An argument of the wrong type met inside a binding (a tuple where
      // an int goes): Python's TypeError, not pybind11's RuntimeError.
      PyErr_SetString(PyExc_TypeError, e.what());
    }
  });
}

}  // namespace tandem::python
