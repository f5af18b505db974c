// Training options and model sources from Python (training_options.h).
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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
    if (key == "name")
      o.kind = optim::parse_optimizer(as<std::string>(v, key));
    else if (key == "learning_rate")
      o.learning_rate = as<double>(v, key);
    else if (key == "momentum")
      o.momentum = as<double>(v, key);
    else if (key == "nesterov")
      o.nesterov = as<bool>(v, key);
    else if (key == "weight_decay") {
      if (!v.is_none()) o.weight_decay = as<double>(v, key);
    } else if (key == "beta1")
      o.beta1 = as<double>(v, key);
    else if (key == "beta2")
      o.beta2 = as<double>(v, key);
    else if (key == "eps")
      o.eps = as<double>(v, key);
    else if (key == "global_clip_norm")
      o.global_clip_norm = as<double>(v, key);
    else
      throw py::value_error("unknown optimizer setting '" + key + "'");
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
    return held_with_python((*held)());
  };
}

// The model a factory describes, except that its first replica is `first`
// (a module the user built, possibly trained or loaded: the other replicas
// receive its values), the rest built as the factory builds them.
train::ModelFactory with_first_replica(train::ModelFactory factory,
                                       std::shared_ptr<nn::Module> first) {
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
    factory =
        with_first_replica(std::move(factory), model["first"].cast<std::shared_ptr<nn::Module>>());
  }
  return factory;
}

namespace {

using train::TrainConfig;

using Setter = std::function<void(TrainConfig&, const py::handle&, const std::string&)>;

template <typename T, typename Field>
Setter field(Field TrainConfig::*member) {
  return [member](TrainConfig& c, const py::handle& v, const std::string& key) {
    c.*member = as<T>(v, key);
  };
}

// A field of the step engine's settings (TrainConfig::engine).
template <typename T, typename Field>
Setter engine_field(Field distribute::EngineOptions::*member) {
  return [member](TrainConfig& c, const py::handle& v, const std::string& key) {
    c.engine.*member = as<T>(v, key);
  };
}

const std::map<std::string, Setter>& config_setters() {
  static const std::map<std::string, Setter> setters = {
      {"epochs", field<int64_t>(&TrainConfig::epochs)},
      {"batch_size", field<int64_t>(&TrainConfig::batch_size)},
      {"accumulation_steps", engine_field<int>(&distribute::EngineOptions::accumulation_steps)},
      {"micro_batch_size", field<int64_t>(&TrainConfig::micro_batch_size)},
      {"eval_batch_size", field<int64_t>(&TrainConfig::eval_batch_size)},
      {"drop_remainder", field<bool>(&TrainConfig::drop_remainder)},
      {"steps_per_epoch", field<int64_t>(&TrainConfig::steps_per_epoch)},
      {"repeat", field<bool>(&TrainConfig::repeat)},
      {"schedule",
       [](TrainConfig& c, const py::handle& v, const std::string& k) {
         c.schedule = optim::parse_schedule(as<std::string>(v, k));
       }},
      {"lr_step_epochs", field<double>(&TrainConfig::lr_step_epochs)},
      {"lr_gamma", field<double>(&TrainConfig::lr_gamma)},
      {"min_lr", field<double>(&TrainConfig::min_lr)},
      {"warmup_epochs", field<double>(&TrainConfig::warmup_epochs)},
      {"lr_scaling", field<std::string>(&TrainConfig::lr_scaling)},
      {"reference_batch", field<int64_t>(&TrainConfig::reference_batch)},
      {"seed", engine_field<uint64_t>(&distribute::EngineOptions::seed)},
      {"noise_scale_every", field<int64_t>(&TrainConfig::noise_scale_every)},
      {"sync_every", engine_field<int>(&distribute::EngineOptions::sync_every)},
      {"average_optimizer_state",
       engine_field<bool>(&distribute::EngineOptions::average_optimizer_state)},
      {"input_feature", field<std::string>(&TrainConfig::input_feature)},
      {"prefetch_batches", field<int>(&TrainConfig::prefetch_batches)},
      {"input_parallel_calls", field<int>(&TrainConfig::input_parallel_calls)},
      {"output_dir", field<std::string>(&TrainConfig::output_dir)},
      {"resume", field<bool>(&TrainConfig::resume)},
      {"checkpoint_every", field<int64_t>(&TrainConfig::checkpoint_every)},
      {"stop_after_epochs", field<int64_t>(&TrainConfig::stop_after_epochs)},
      {"zero", [](TrainConfig& c, const py::handle& v,
                  const std::string& k) { c.engine.reducer.zero_stage = as<int>(v, k); }},
      {"strategy",
       [](TrainConfig& c, const py::handle& v, const std::string& k) {
         c.strategy.kind = distribute::parse_strategy(as<std::string>(v, k));
       }},
      {"devices", [](TrainConfig& c, const py::handle& v,
                     const std::string& k) { c.strategy.devices = as<int>(v, k); }},
      {"allow_oversubscription",
       [](TrainConfig& c, const py::handle& v, const std::string& k) {
         c.strategy.allow_oversubscription = as<bool>(v, k);
       }},
      {"threads_per_device",
       [](TrainConfig& c, const py::handle& v, const std::string& k) {
         c.strategy.threads_per_device = as<int>(v, k);
       }},
      {"max_staleness",
       [](TrainConfig& c, const py::handle& v, const std::string& k) {
         if (!v.is_none()) c.engine.parameter_server.max_staleness = as<int64_t>(v, k);
       }},
      {"loss_scale", [](TrainConfig& c, const py::handle& v,
                        const std::string&) { c.engine.loss_scale = loss_scale_from(v); }},
  };
  return setters;
}

void set_objective(TrainConfig& c, const py::dict& d) {
  const std::string labels = d.contains("labels") ? d["labels"].cast<std::string>() : "label";
  train::LossOptions options{.labels = labels};
  if (d.contains("label_smoothing")) options.label_smoothing = d["label_smoothing"].cast<double>();
  if (d.contains("ignore_index") && !d["ignore_index"].is_none()) {
    options.ignore_index = d["ignore_index"].cast<int32_t>();
  }
  c.loss = train::make_loss(d["loss"].cast<std::string>(), options);
  c.metrics.clear();
  for (const auto& name : d["metrics"].cast<std::vector<std::string>>()) {
    c.metrics.push_back(
        train::make_metric(name, {.labels = labels, .ignore_index = options.ignore_index}));
  }
}

}  // namespace

TrainConfig config_from(const py::dict& options) {
  TrainConfig c;
  const auto& setters = config_setters();
  for (const auto& [k, v] : options) {
    const std::string key = k.cast<std::string>();
    if (v.is_none() && key != "optimizer" && key != "objective") continue;  // None: the default
    if (key == "optimizer") {
      set_optimizer(c.engine.optimizer, v.cast<py::dict>());
    } else if (key == "objective") {
      set_objective(c, v.cast<py::dict>());
    } else if (auto it = setters.find(key); it != setters.end()) {
      it->second(c, v, key);
    } else {
      std::string known;
      for (const auto& [name, _] : setters) known += (known.empty() ? "" : ", ") + name;
      throw py::value_error("unknown training option '" + key + "' (known: " + known + ")");
    }
  }
  return c;
}

std::vector<std::string> training_option_names() {
  std::vector<std::string> names;
  for (const auto& [name, _] : config_setters()) names.push_back(name);
  return names;
}

}  // namespace tandem::python
