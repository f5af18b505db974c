#pragma once
// What the Trainer binding (train.cc) and the engine binding (engine.cc)
// both read from Python: typed option values, loss scaling, optimizer
// settings, the training configuration, and the model a tandem/*.py model
// source dict describes.
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "tandem/optim/optimizer.h"
#include "tandem/precision/loss_scaler.h"
#include "tandem/train/model_factory.h"
#include "tandem/train/train_config.h"

namespace tandem::python {

// An option's value as T; TypeError naming the option otherwise.
template <typename T>
T as(const py::handle& value, const std::string& key) {
  try {
    return value.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error("option '" + key + "' has the wrong type (" +
                         py::str(py::type::of(value)).cast<std::string>() + ")");
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
