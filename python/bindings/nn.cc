// tandem.nn's C++ half: Module (subclassable from Python: its forward is
// called back, holding the GIL, on whichever replica thread runs it), the
// layers with explicit sizes, and the built-in models. tandem/nn.py adds
// attribute registration (self.w = Parameter(...)) and the Keras-style layers.
#include <memory>
#include <string>
#include <utility>

#include "common.h"
#include "tandem/base/random.h"
#include "tandem/interop/torch_state.h"
#include "tandem/nn/activation.h"
#include "tandem/nn/conv.h"
#include "tandem/nn/dropout.h"
#include "tandem/nn/embedding.h"
#include "tandem/nn/flatten.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/model_file.h"
#include "tandem/nn/models.h"
#include "tandem/nn/normalization.h"
#include "tandem/nn/sequential.h"
#include "tandem/nn/transformer.h"
#include "tandem/precision/policy.h"

namespace tandem::python {
namespace {

using nn::Module;

// A Module whose forward (and, optionally, describe) is Python's.
class PythonModule : public Module {
 public:
  Variable forward(const Variable& input) override {
    PYBIND11_OVERRIDE_PURE(Variable, Module, forward, input);
  }
  std::string describe() const override {
    py::gil_scoped_acquire gil;
    if (py::function f = py::get_override(this, "describe")) return f().cast<std::string>();
    return py::type::of(py::cast(this)).attr("__name__").cast<std::string>();
  }
  Variable add_parameter(const std::string& name, const Variable& parameter) {
    return replace_parameter(name, parameter);
  }
  void add_buffer(const std::string& name, const Tensor& value) { register_buffer(name, value); }
  void add_module(const std::string& name, std::shared_ptr<Module> module) {
    register_module(name, std::move(module));
  }
  std::string kind_of(const std::string& name) const { return registered_as(name); }
  bool remove(const std::string& name) { return unregister(name); }
};

// The layers' dtypes under the global policy (Keras's): matrix units in the
// policy's compute dtype, activations stored in its activation dtype.
DType default_compute_dtype(const py::object& given) {
  if (!given.is_none()) return dtype_from(given);
  return precision::matrix_dtype(global_policy());
}
std::optional<DType> default_output_dtype(const py::object& given) {
  if (!given.is_none()) return dtype_from(given);
  return precision::model_options(global_policy()).activation_dtype;
}

void bind_module(py::module_& nn) {
  py::class_<Module, PythonModule, std::shared_ptr<Module>>(nn, "Module", py::dynamic_attr(), R"doc(
The base of layers and models (PyTorch's nn.Module). Subclass it in Python
and define forward(self, x); parameters (tandem.nn.Parameter) and
sub-modules assigned as attributes are registered, the module's own first,
then each sub-module's, in assignment order (PyTorch's): that fixes their
names ("fc.weight") and the layout of gradient buckets. Calling
the module runs forward with tandem's autograd recording the graph.)doc")
      .def(py::init<>())
      .def("forward", &Module::forward, py::arg("x"))
      .def(
          "__call__",
          [](Module& m, const py::object& x) {
            const Variable v = as_variable(x);
            py::gil_scoped_release release;
            return m(v);
          },
          py::arg("x"))
      .def("describe", &Module::describe, "One line describing the layer.")
      .def("parameters", &Module::parameters, "The parameters, depth first in registration order.")
      .def("named_parameters", &Module::named_parameters)
      .def(
          "named_buffers",
          [](Module& m) {
            std::vector<std::pair<std::string, Variable>> out;
            for (auto& [name, t] : m.named_buffers()) out.emplace_back(name, Variable(*t));
            return out;
          },
          "Buffers (state saved but not trained, e.g. running statistics) sharing memory.")
      .def("__getattr__",
           [](Module& m, const std::string& name) -> py::object {
             // A C++ layer's own parameters by name (linear.weight, embedding.weight),
             // as PyTorch's modules have them; sub-modules' are reached through them.
             for (const auto& [key, v] : m.named_parameters()) {
               if (key == name) return py::cast(v);
             }
             throw py::attribute_error("'" + m.describe() + "' has no attribute '" + name + "'");
           })
      .def("parameter_count", &Module::parameter_count)
      .def(
          "train", [](Module& m, bool on) { m.train(on); }, py::arg("mode") = true)
      .def("eval", &Module::eval)
      .def_property_readonly("training", &Module::is_training)
      .def("zero_grad", &Module::zero_grad)
      .def("summary", &Module::summary, "Each leaf layer, its parameter count, and the total.")
      .def(
          "save_weights",
          [](Module& m, const std::string& path, const py::object& dtype) {
            const DType d = dtype.is_none() ? DType::f32 : dtype_from(dtype);
            py::gil_scoped_release release;
            interop::save_safetensors(m, path, d);
          },
          py::arg("path"), py::arg("dtype") = py::none(),
          "The parameters and buffers in a safetensors file, in PyTorch's names and layouts "
          "(safetensors.torch.load_file and load_state_dict read it); dtype float32 (default), "
          "bfloat16 or float16.")
      .def(
          "load_weights",
          [](Module& m, const std::string& path, bool strict) {
            interop::LoadReport r;
            {
              py::gil_scoped_release release;
              r = interop::load_safetensors(interop::SafetensorsFile(path), m, {.strict = strict});
            }
            py::dict out;
            out["loaded"] = r.loaded;
            out["missing"] = r.missing;
            out["unexpected"] = r.unexpected;
            return out;
          },
          py::arg("path"), py::arg("strict") = true,
          "Loads a safetensors file (save_weights', or PyTorch's state_dict saved with "
          "safetensors); strict: every tensor must match one of the model's. Returns what "
          "was loaded, missing and unexpected.")
      .def("set_recompute", &Module::set_recompute, py::arg("on"))
      .def("recompute_blocks", &Module::recompute_blocks,
           "Recomputes every recomputable block's activations in backward; returns how many.")
      .def("_register_parameter", [](PythonModule& m, const std::string& name,
                                     const Variable& v) { return m.add_parameter(name, v); })
      .def("_registered_as",
           [](const PythonModule& m, const std::string& name) { return m.kind_of(name); })
      .def("_unregister", [](PythonModule& m, const std::string& name) { return m.remove(name); })
      .def("_register_buffer", [](PythonModule& m, const std::string& name,
                                  const Variable& v) { m.add_buffer(name, v.value()); })
      .def("_register_module",
           [](PythonModule& m, const std::string& name, std::shared_ptr<Module> child) {
             m.add_module(name, std::move(child));
           });
}

void bind_layers(py::module_& nn) {
  using py::arg;
  py::class_<nn::Linear, Module, std::shared_ptr<nn::Linear>>(
      nn, "Linear",
      "act(x @ weight.T + bias): x (..., in) -> (..., out); weight (out, in) as in PyTorch.")
      .def(py::init([](int64_t in, int64_t out, bool bias, const py::object& activation,
                       const py::object& compute_dtype, const py::object& output_dtype) {
             nn::LinearOptions o{.bias = bias,
                                 .activation = activation_from(activation),
                                 .compute_dtype = default_compute_dtype(compute_dtype),
                                 .output_dtype = default_output_dtype(output_dtype)};
             return std::make_shared<nn::Linear>(in, out, o);
           }),
           arg("in_features"), arg("out_features"), arg("bias") = true,
           arg("activation") = py::none(), arg("compute_dtype") = py::none(),
           arg("output_dtype") = py::none())
      .def_property_readonly("weight", &nn::Linear::weight)
      .def_property_readonly("bias", [](const nn::Linear& l) -> py::object {
        return l.bias().defined() ? py::cast(l.bias()) : py::none();
      });
  py::class_<nn::Conv2d, Module, std::shared_ptr<nn::Conv2d>>(
      nn, "Conv2d", "Convolution over (N, H, W, C) images; weight (KH, KW, C, O).")
      .def(py::init([](int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                       bool bias, const py::object& activation, const py::object& compute_dtype,
                       const py::object& output_dtype) {
             nn::Conv2dOptions o{.stride = stride,
                                 .padding = padding,
                                 .bias = bias,
                                 .activation = activation_from(activation),
                                 .compute_dtype = default_compute_dtype(compute_dtype),
                                 .output_dtype = default_output_dtype(output_dtype)};
             return std::make_shared<nn::Conv2d>(in, out, kernel, o);
           }),
           arg("in_channels"), arg("out_channels"), arg("kernel_size"), arg("stride") = 1,
           arg("padding") = 0, arg("bias") = true, arg("activation") = py::none(),
           arg("compute_dtype") = py::none(), arg("output_dtype") = py::none());
  py::class_<nn::MaxPool2d, Module, std::shared_ptr<nn::MaxPool2d>>(nn, "MaxPool2d")
      .def(py::init<int64_t, int64_t, int64_t>(), arg("kernel_size"), arg("stride") = 0,
           arg("padding") = 0);
  py::class_<nn::AvgPool2d, Module, std::shared_ptr<nn::AvgPool2d>>(nn, "AvgPool2d")
      .def(py::init<int64_t, int64_t, int64_t>(), arg("kernel_size"), arg("stride") = 0,
           arg("padding") = 0);
  py::class_<nn::GlobalAvgPool, Module, std::shared_ptr<nn::GlobalAvgPool>>(
      nn, "GlobalAvgPool", "(N, H, W, C) -> (N, C).")
      .def(py::init<>());
  py::class_<nn::Flatten, Module, std::shared_ptr<nn::Flatten>>(nn, "Flatten").def(py::init<>());
  py::class_<nn::ReLU, Module, std::shared_ptr<nn::ReLU>>(nn, "ReLU").def(py::init<>());
  py::class_<nn::GELU, Module, std::shared_ptr<nn::GELU>>(nn, "GELU").def(py::init<>());
  py::class_<nn::Dropout, Module, std::shared_ptr<nn::Dropout>>(nn, "Dropout")
      .def(py::init([](float p) {
             if (!(p >= 0.0f && p < 1.0f)) throw py::value_error("Dropout: p must be in [0, 1)");
             return std::make_shared<nn::Dropout>(p);
           }),
           arg("p") = 0.5f);
  py::class_<nn::LayerNorm, Module, std::shared_ptr<nn::LayerNorm>>(
      nn, "LayerNorm", "Normalises over the last dimension.")
      .def(py::init<int64_t, float>(), arg("features"), arg("eps") = 1e-5f);
  py::class_<nn::BatchNorm2d, Module, std::shared_ptr<nn::BatchNorm2d>>(
      nn, "BatchNorm", "Batch normalisation over every dimension but the last (channels).")
      .def(py::init([](int64_t channels, float eps, float momentum) {
             return std::make_shared<nn::BatchNorm2d>(channels, eps, momentum);
           }),
           arg("channels"), arg("eps") = 1e-5f, arg("momentum") = 0.1f);
  py::class_<nn::Embedding, Module, std::shared_ptr<nn::Embedding>>(
      nn, "Embedding", "Rows of a (vocabulary, dim) table gathered by int32 indices.")
      .def(py::init([](int64_t vocabulary, int64_t dim) {
             return std::make_shared<nn::Embedding>(vocabulary, dim);
           }),
           arg("vocabulary"), arg("dim"));
  py::class_<nn::CausalSelfAttention, Module, std::shared_ptr<nn::CausalSelfAttention>>(
      nn, "CausalSelfAttention",
      "GPT-2's causal multi-head self-attention: (B, T, C) -> (B, T, C).")
      .def(py::init([](int64_t width, int64_t heads, float dropout) {
             nn::GptConfig c{.width = width,
                             .heads = heads,
                             .dropout = dropout,
                             .compute_dtype = default_compute_dtype(py::none()),
                             .activation_dtype = default_output_dtype(py::none())};
             nn::check_gpt_config(c);
             return std::make_shared<nn::CausalSelfAttention>(c, thread_generator());
           }),
           arg("width"), arg("heads"), arg("dropout") = 0.0f);
  py::class_<nn::Sequential, Module, std::shared_ptr<nn::Sequential>>(
      nn, "Sequential",
      "Modules applied in order; their parameters are named by position (\"0.weight\").")
      .def(py::init([](const py::args& modules) {
        auto s = std::make_shared<nn::Sequential>();
        for (const auto& m : modules)
          s->add(held_with_python(py::reinterpret_borrow<py::object>(m)));
        return s;
      }))
      .def("add", [](nn::Sequential& s, const py::object& m) { s.add(held_with_python(m)); })
      .def("__len__", &nn::Sequential::size);
}

void bind_models(py::module_& m) {
  py::module_ models = m.def_submodule("models", "The built-in models and model files.");
  models.def(
      "build",
      [](const std::string& name, const std::string& settings, uint64_t seed,
         const py::object& policy) {
        nn::ModelOptions options = precision::model_options(policy_from(policy), {.seed = seed});
        options.settings = settings;
        return nn::make_model(name, options);
      },
      py::arg("name"), py::arg("settings") = "", py::arg("seed") = 0,
      py::arg("policy") = py::none(),
      "A built-in model (cnn, mlp, gpt, resnet) with settings \"key=value,...\".");
  models.def("names", &nn::model_names);
  models.def("canonical_settings", &nn::canonical_settings, py::arg("name"), py::arg("settings"));
  models.def(
      "from_definition",
      [](const std::string& text, const std::string& source, uint64_t seed,
         const py::object& policy) {
        const nn::ModelDefinition d = nn::parse_model_definition(text, source);
        return std::shared_ptr<Module>(
            nn::build_model(d, precision::model_options(policy_from(policy), {.seed = seed})));
      },
      py::arg("text"), py::arg("source"), py::arg("seed") = 0, py::arg("policy") = py::none(),
      "A model from a model file's text (docs/model_files.md).");
  models.def("input_of_definition", [](const std::string& text, const std::string& source) {
    const nn::ModelDefinition d = nn::parse_model_definition(text, source);
    return py::make_tuple(d.input_shape, d.input_dtype, d.name);
  });
  m.def(
      "set_global_policy",
      [](const std::string& name) { set_global_policy(precision::parse_policy(name)); },
      py::arg("policy"),
      "Keras's mixed_precision.set_global_policy: float32, mixed_bfloat16, mixed_float16.");
  m.def("global_policy", [] { return std::string(precision::policy_name(global_policy())); });
  m.def(
      "manual_seed", [](uint64_t seed) { thread_generator() = Generator(seed); }, py::arg("seed"),
      "Seeds this thread's generator (layer initialisation, dropout).");
}

}  // namespace

void bind_nn(py::module_& m) {
  py::module_ nn = m.def_submodule("nn", "Layers and the Module base class.");
  bind_module(nn);
  bind_layers(nn);
  bind_models(m);
}

std::shared_ptr<Module> held_with_python(py::object module) {
  auto held = module.cast<std::shared_ptr<Module>>();
  return {keep_python(std::move(module)), held.get()};
}

}  // namespace tandem::python
