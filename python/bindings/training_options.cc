// Training options and model sources from Python (training_options.h).
#include <memory>
#include <string>
#include <utility>

#include "training_options.h"

namespace tandem::python {

std::optional<precision::LossScalerOptions> loss_scale_from(const py::handle& v) {
  if (v.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(v)) {
    if (v.cast<std::string>() != "dynamic") {
      throw py::value_error("loss_scale must be \"dynamic\", None or a positive number");
    }
    return precision::LossScalerOptions{};
  }
  double scale = 0.0;
  try {
    scale = v.cast<double>();
  } catch (const py::cast_error&) {
    throw py::type_error("loss_scale must be \"dynamic\", None or a positive number, got " +
                         py::str(py::type::of(v)).cast<std::string>());
  }
  if (!(scale > 0.0)) throw py::value_error("loss_scale must be positive");
  return precision::LossScalerOptions{.dynamic = false, .initial_scale = scale};
}

void set_optimizer(optim::OptimizerConfig& o, const py::dict& d) {
  for (const auto& [k, v] : d) {
    const std::string key = k.cast<std::string>();
    if (key == "name") o.name = as<std::string>(v, key);
    else if (key == "learning_rate") o.learning_rate = as<double>(v, key);
    else if (key == "momentum") o.momentum = as<double>(v, key);
    else if (key == "nesterov") o.nesterov = as<bool>(v, key);
    else if (key == "weight_decay") {
      if (!v.is_none()) o.weight_decay = as<double>(v, key);
    } else if (key == "beta1") o.beta1 = as<double>(v, key);
    else if (key == "beta2") o.beta2 = as<double>(v, key);
    else if (key == "eps") o.eps = as<double>(v, key);
    else if (key == "global_clip_norm") o.global_clip_norm = as<double>(v, key);
    else throw py::value_error("unknown optimizer setting '" + key + "'");
  }
}

namespace {

// A model built by Python: each call runs `build` holding the GIL; the
// module keeps its Python object (and so its forward) alive as long as the
// engine holds it.
distribute::ModelBuilder python_builder(py::function build) {
  auto held = keep_python(std::move(build));
  return [held]() -> std::shared_ptr<nn::Module> {
    py::gil_scoped_acquire gil;
    py::object object = (*held)();
    auto module = object.cast<std::shared_ptr<nn::Module>>();
    return {keep_python(std::move(object)), module.get()};
  };
}

// The model a factory describes, except that its first replica is `first`
// (a module the user built, possibly trained or loaded: the other replicas
// receive its values), the rest built as the factory builds them.
train::ModelFactory with_first_replica(train::ModelFactory factory, std::shared_ptr<nn::Module> first) {
  auto pending = std::make_shared<std::shared_ptr<nn::Module>>(std::move(first));
  factory.build = [pending, rest = std::move(factory.build)]() -> std::shared_ptr<nn::Module> {
    if (*pending) return std::exchange(*pending, nullptr);
    return rest();
  };
  return factory;
}

train::ModelFactory spec_factory(const py::dict& model) {
  const std::string kind = model["kind"].cast<std::string>();
  const precision::Policy policy = policy_from(model["policy"]);
  const uint64_t seed = model.contains("seed") ? model["seed"].cast<uint64_t>() : 0;
  if (kind == "builtin") {
    return train::builtin_model(model["name"].cast<std::string>(), policy, seed, std::nullopt,
                                model["settings"].cast<std::string>());
  }
  if (kind == "definition") {
    train::ModelSpec spec{.name = model["name"].cast<std::string>(),
                          .definition = model["text"].cast<std::string>(),
                          .policy = policy,
                          .compute_dtype = precision::matrix_dtype(policy),
                          .seed = seed,
                          .rebuildable = true};
    return train::rebuild_model(spec);
  }
  if (kind == "python") {
    return train::custom_model(model["name"].cast<std::string>(),
                               python_builder(model["build"].cast<py::function>()), policy);
  }
  throw py::value_error("unknown model kind '" + kind + "'");
}

}  // namespace

train::ModelFactory factory_from(const py::dict& model) {
  train::ModelFactory factory = spec_factory(model);
  if (model.contains("first")) {
    factory = with_first_replica(std::move(factory), model["first"].cast<std::shared_ptr<nn::Module>>());
  }
  return factory;
}

}  // namespace tandem::python
