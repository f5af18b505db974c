#pragma once
// What the Trainer binding (train.cc) and the engine binding (engine.cc)
// both read from Python: typed option values, loss scaling, optimizer
// settings, the training configuration, and the model a tandem/*.py model
// source dict describes.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "common.h"
#include "tandem/optim/optimizer.h"
#include "tandem/precision/loss_scaler.h"
#include "tandem/train/model_factory.h"
#include "tandem/train/train_config.h"

namespace tandem::python {

// An option's value as T; TypeError naming the option otherwise. An
// integer option takes integers only (2.9 epochs were 2, True was 1), a
// bool option bools only (2 was True).
template <typename T>
T as(const py::handle& value, const std::string& key) {
  const auto wrong_type = [&](const char* wanted) {
    return py::type_error("option '" + key + "' must be " + wanted + ", got " +
                          py::str(py::type::of(value)).cast<std::string>());
  };
  if constexpr (std::is_same_v<T, bool>) {
    const std::string type = Py_TYPE(value.ptr())->tp_name;
    if (!PyBool_Check(value.ptr()) && type != "numpy.bool_") throw wrong_type("True or False");
    return value.cast<bool>();
  } else if constexpr (std::is_same_v<T, uint64_t>) {  // seeds: 0 to 2^64 - 1
    if (PyBool_Check(value.ptr()) || PyFloat_Check(value.ptr()) || !PyIndex_Check(value.ptr()))
      throw wrong_type("an integer");
    const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
    if (!index) throw py::error_already_set();
    const unsigned long long v = PyLong_AsUnsignedLongLong(index.ptr());
    if (PyErr_Occurred() != nullptr) {
      PyErr_Clear();
      throw py::value_error("option '" + key + "' must be from 0 to 2^64 - 1, got " +
                            py::str(index).cast<std::string>());
    }
    return static_cast<T>(v);
  } else if constexpr (std::is_integral_v<T>) {
    const std::optional<int64_t> n = integer_from(value);
    if (!n) throw wrong_type("an integer");
    if (*n < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        (*n > 0 && static_cast<uint64_t>(*n) > std::numeric_limits<T>::max())) {
      throw py::value_error("option '" + key + "' is out of range: " + std::to_string(*n));
    }
    return static_cast<T>(*n);
  } else {
    try {
      return value.cast<T>();
    } catch (const py::cast_error&) {
      throw py::type_error("option '" + key + "' has the wrong type (" +
                           py::str(py::type::of(value)).cast<std::string>() + ")");
    }
  }
}

// None: no scaling; "dynamic"; or a positive fixed scale.
std::optional<precision::LossScalerOptions> loss_scale_from(const py::handle& value);

// tandem.optimizers' config() dict into `o`; ValueError for an unknown key.
void set_optimizer(optim::OptimizerConfig& o, const py::dict& settings);

// A TrainConfig from fit's and compile()'s options (tandem/training.py):
// the Trainer's settings by name, "optimizer" and "objective" dicts; None
// means the default. ValueError naming the known options for an unknown
// one, TypeError for a value of the wrong type.
train::TrainConfig config_from(const py::dict& options);
// The option names config_from knows besides "optimizer" and "objective".
std::vector<std::string> training_option_names();

// The model a model source describes (Trainable._model_source: a built-in,
// a model-file text, or a Python builder; "first": replica 0 as built).
train::ModelFactory factory_from(const py::dict& model);

}  // namespace tandem::python
