#include "tandem/nn/models.h"

#include <algorithm>
#include <map>

#include "tandem/base/error.h"
#include "tandem/nn/conv.h"
#include "tandem/nn/flatten.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/resnet.h"
#include "tandem/nn/transformer.h"

namespace tandem::nn {

using kernels::Activation;

std::optional<DType> last_layer_output_dtype(const ModelOptions& options) {
  if (options.float32_outputs && options.activation_dtype) return DType::f32;
  return options.activation_dtype;
}

std::shared_ptr<Sequential> make_cnn(const ModelOptions& options) {
  Generator generator(options.seed);
  const Conv2dOptions conv{.padding = 1,
                           .activation = Activation::relu,
                           .compute_dtype = options.compute_dtype,
                           .output_dtype = options.activation_dtype};
  const LinearOptions hidden{.activation = Activation::relu,
                             .compute_dtype = options.compute_dtype,
                             .output_dtype = options.activation_dtype};
  const LinearOptions logits{.compute_dtype = options.compute_dtype,
                             .output_dtype = last_layer_output_dtype(options)};
  auto model = std::make_shared<Sequential>();
  model->emplace<Conv2d>(1, 32, 3, conv, generator)
      .emplace<MaxPool2d>(2)
      .emplace<Conv2d>(32, 64, 3, conv, generator)
      .emplace<MaxPool2d>(2)
      .emplace<Flatten>()
      .emplace<Linear>(3136, 128, hidden, generator)
      .emplace<Linear>(128, 10, logits, generator);
  return model;
}

std::shared_ptr<Sequential> make_mlp(const ModelOptions& options) {
  Generator generator(options.seed);
  const LinearOptions hidden{.activation = Activation::relu,
                             .compute_dtype = options.compute_dtype,
                             .output_dtype = options.activation_dtype};
  const LinearOptions logits{.compute_dtype = options.compute_dtype,
                             .output_dtype = last_layer_output_dtype(options)};
  auto model = std::make_shared<Sequential>();
  model->emplace<Flatten>()
      .emplace<Linear>(784, 512, hidden, generator)
      .emplace<Linear>(512, 512, hidden, generator)
      .emplace<Linear>(512, 10, logits, generator);
  return model;
}

void check_model_options(const ModelOptions& options) {
  if (options.compute_dtype != DType::f32 && options.compute_dtype != DType::bf16) {
    TANDEM_THROW(InvalidArgument, "compute dtype must be f32 or bf16, got ",
                 dtype_name(options.compute_dtype));
  }
  if (options.activation_dtype && !is_floating(*options.activation_dtype)) {
    TANDEM_THROW(InvalidArgument, "activation dtype must be f32, bf16 or f16, got ",
                 dtype_name(*options.activation_dtype));
  }
}

namespace {

using Settings = std::map<std::string, std::string>;

Settings parse_settings(const std::string& model, const std::string& text) {
  Settings settings;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(at, end - at);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      TANDEM_THROW(InvalidArgument, "model ", model, ": setting '", item,
                   "' is not KEY=VALUE (settings are \"key=value,key=value\")");
    }
    if (!settings.emplace(item.substr(0, eq), item.substr(eq + 1)).second)
      TANDEM_THROW(InvalidArgument, "model ", model, ": setting '", item.substr(0, eq),
                   "' given twice");
    at = end + 1;
  }
  return settings;
}

// Reads the settings of one model, refusing any it does not know.
class SettingsReader {
 public:
  SettingsReader(std::string model, Settings settings)
      : model_(std::move(model)), settings_(std::move(settings)) {}

  int64_t integer(const std::string& key, int64_t fallback) {
    return number<int64_t>(key, fallback, "an integer",
                           [](const std::string& t, size_t* used) { return std::stoll(t, used); });
  }
  float real(const std::string& key, float fallback) {
    return number<float>(key, fallback, "a number",
                         [](const std::string& t, size_t* used) { return std::stof(t, used); });
  }
  bool boolean(const std::string& key, bool fallback) {
    known_.push_back(key);
    auto it = settings_.find(key);
    if (it == settings_.end()) return fallback;
    if (it->second == "true") return true;
    if (it->second == "false") return false;
    TANDEM_THROW(InvalidArgument, "model ", model_, ": ", key, " must be true or false, got '",
                 it->second, "'");
  }
  // Throws for a setting no reader asked for.
  void finish() const {
    for (const auto& [key, value] : settings_) {
      if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
      std::vector<std::string> names = known_;
      std::sort(names.begin(), names.end());
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      TANDEM_THROW(InvalidArgument, "model ", model_, " has no setting '", key, "'",
                   names.empty() ? std::string(" (it takes none)") : " (expected " + list + ")");
    }
  }

 private:
  // The whole value parsed by parse, or the fallback when the key is absent.
  template <typename T, typename Parse>
  T number(const std::string& key, T fallback, const char* what, Parse parse) {
    known_.push_back(key);
    auto it = settings_.find(key);
    if (it == settings_.end()) return fallback;
    size_t used = 0;
    T v{};
    try {
      v = parse(it->second, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != it->second.size() || it->second.empty())
      TANDEM_THROW(InvalidArgument, "model ", model_, ": ", key, " must be ", what, ", got '",
                   it->second, "'");
    return v;
  }

  std::string model_;
  Settings settings_;
  std::vector<std::string> known_;
};

GptConfig gpt_config(const ModelOptions& options) {
  SettingsReader r("gpt", parse_settings("gpt", options.settings));
  GptConfig c;
  c.vocabulary = r.integer("vocabulary", c.vocabulary);
  c.context = r.integer("context", c.context);
  c.layers = r.integer("layers", c.layers);
  c.width = r.integer("width", c.width);
  c.heads = r.integer("heads", c.heads);
  c.mlp_ratio = r.integer("mlp_ratio", c.mlp_ratio);
  c.dropout = r.real("dropout", c.dropout);
  r.finish();
  c.compute_dtype = options.compute_dtype;
  c.activation_dtype = options.activation_dtype;
  c.float32_logits = options.float32_outputs;
  check_gpt_config(c);
  return c;
}

ResNetConfig resnet_config(const ModelOptions& options) {
  SettingsReader r("resnet", parse_settings("resnet", options.settings));
  ResNetConfig c;
  c.depth = r.integer("depth", c.depth);
  c.width = r.integer("width", c.width);
  c.channels = r.integer("channels", c.channels);
  c.classes = r.integer("classes", c.classes);
  c.synchronized_batch_norm = r.boolean("sync_bn", c.synchronized_batch_norm);
  r.finish();
  c.compute_dtype = options.compute_dtype;
  c.activation_dtype = options.activation_dtype;
  c.float32_logits = options.float32_outputs;
  check_resnet_config(c);
  return c;
}

void check_no_settings(const std::string& name, const ModelOptions& options) {
  SettingsReader r(name, parse_settings(name, options.settings));
  r.finish();
}

// Validates name and settings without building the model.
void make_model_check(const std::string& name, const ModelOptions& options) {
  if (name == "cnn" || name == "mlp") {
    check_no_settings(name, options);
  } else if (name == "gpt") {
    gpt_config(options);
  } else if (name == "resnet") {
    resnet_config(options);
  } else {
    TANDEM_THROW(InvalidArgument, "unknown model '", name, "' (expected cnn, mlp, gpt or resnet)");
  }
}

}  // namespace

std::shared_ptr<Module> make_model(const std::string& name, const ModelOptions& options) {
  check_model_options(options);
  if (name == "cnn" || name == "mlp") {
    check_no_settings(name, options);
    if (name == "cnn") return make_cnn(options);
    return make_mlp(options);
  }
  if (name == "gpt") {
    const GptConfig config = gpt_config(options);
    Generator generator(options.seed);
    return std::make_shared<Gpt>(config, generator);
  }
  if (name == "resnet") {
    const ResNetConfig config = resnet_config(options);
    Generator generator(options.seed);
    return std::make_shared<ResNet>(config, generator);
  }
  TANDEM_THROW(InvalidArgument, "unknown model '", name, "' (expected cnn, mlp, gpt or resnet)");
}

std::string canonical_settings(const std::string& name, const std::string& settings) {
  ModelOptions options{.settings = settings};
  make_model_check(name, options);
  std::string out;
  for (const auto& [key, value] : parse_settings(name, settings))
    out += (out.empty() ? "" : ",") + key + "=" + value;
  return out;
}

std::vector<std::string> model_names() {
  return {"cnn", "mlp", "gpt", "resnet"};
}

}  // namespace tandem::nn
