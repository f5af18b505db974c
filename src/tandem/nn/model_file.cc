// Model files: the TOML parser and the shape inference (model_builder.cc
// builds the modules). toml++ is a heavy header: only the parsers of TOML
// files (this one, input specifications, search spaces) include it. The keys each layer type takes
// are listed once, in kinds(); the parser refuses any other key and reads only those.

#include "tandem/nn/model_file.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>

#include "tandem/base/detail/toml_document.h"
#include "tandem/base/error.h"

namespace tandem::nn {
namespace {

// Bounds that keep the shape arithmetic far from int64 overflow: the largest
// size one key may hold, and the most elements one example may have.
constexpr int64_t kMaxSize = int64_t{1} << 31;
constexpr int64_t kMaxElements = int64_t{1} << 40;
// Per-example rank: tensors have at most Shape::kMaxRank dimensions, one of
// them the batch's.
constexpr size_t kMaxRank = Shape::kMaxRank - 1;

struct KindInfo {
  LayerKind kind;
  std::string_view name;
  std::vector<std::string_view> keys;  // besides "type"
};

// In LayerKind order.
const std::vector<KindInfo>& kinds() {
  static const std::vector<KindInfo> table = {
      {LayerKind::dense, "dense", {"units", "activation", "bias"}},
      {LayerKind::conv2d,
       "conv2d",
       {"filters", "kernel", "stride", "padding", "activation", "bias"}},
      {LayerKind::max_pool2d, "max_pool2d", {"size", "stride"}},
      {LayerKind::batch_norm, "batch_norm", {"momentum", "eps", "synchronized", "activation"}},
      {LayerKind::layer_norm, "layer_norm", {"eps"}},
      {LayerKind::dropout, "dropout", {"rate"}},
      {LayerKind::flatten, "flatten", {}},
      {LayerKind::embedding, "embedding", {"vocabulary", "dim"}},
      {LayerKind::activation, "activation", {"function"}},
      {LayerKind::residual, "residual", {"layers", "shortcut", "activation", "recompute"}},
      {LayerKind::avg_pool2d, "avg_pool2d", {"size", "stride"}},
      {LayerKind::global_avg_pool, "global_avg_pool", {}},
      {LayerKind::position_embedding, "position_embedding", {}},
      {LayerKind::attention, "attention", {"heads", "dropout"}},
  };
  return table;
}

const KindInfo& info(LayerKind kind) {
  const KindInfo& entry = kinds().at(static_cast<size_t>(kind));
  TANDEM_CHECK(entry.kind == kind, "kinds() is not in LayerKind order");
  return entry;
}

template <typename T>
std::string join(const std::vector<T>& items, std::string_view separator = ", ") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += detail::concat(items[i]);
  }
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return "(" + join(shape) + ")";
}

std::string_view value_kind(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    default:
      return "nothing";
  }
}

int64_t line_of(const toml::node& node) {
  return static_cast<int64_t>(node.source().begin.line);
}

// Elements per example, or nullopt past kMaxElements.
std::optional<int64_t> element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d > kMaxElements / n) return std::nullopt;
    n *= d;
  }
  return n;
}

// The elements of the layer's largest weight (its parameters' count to
// within a bias), or nullopt past kMaxElements: a definition the parser
// returns builds without an overflow in the weights' shapes (a conv2d's
// kernel x kernel x channels x filters overflowed int64).
std::optional<int64_t> weight_elements(const LayerDefinition& d) {
  switch (d.kind) {
    case LayerKind::dense:
      return element_count({d.input_shape.back(), d.units});
    case LayerKind::conv2d:
      return element_count({d.kernel, d.kernel, d.input_shape[2], d.units});
    case LayerKind::embedding:
      return element_count({d.vocabulary, d.units});
    case LayerKind::attention:  // qkv's (width, 3 width)
      return element_count({d.input_shape[1], 3 * d.input_shape[1]});
    default:  // the rest hold at most their output's elements, or none
      return 1;
  }
}

// What flows between layers during shape inference.
struct Flow {
  std::vector<int64_t> shape;  // per example
  bool ids = false;            // i32 token ids (only an embedding takes them)
};

class Parser {
 public:
  explicit Parser(std::string_view source) : source_(source) {}

  ModelDefinition parse(std::string_view text) const;

 private:
  // "model.toml:12: <context><message>"; line 0 names the file alone.
  template <typename... Args>
  [[noreturn]] void fail(int64_t line, const std::string& context, const Args&... args) const {
    const std::string where =
        line > 0 ? std::string(source_) + ":" + std::to_string(line) : std::string(source_);
    TANDEM_THROW(InvalidArgument, where, ": ", context, args...);
  }

  std::vector<LayerDefinition> parse_layers(const toml::array& array, const std::string& prefix,
                                            Flow& flow) const;
  LayerDefinition parse_layer(const toml::table& table, const std::string& path, Flow& flow) const;
  std::vector<int64_t> parse_input_shape(const toml::node& node) const;

  friend class LayerReader;
  std::string_view source_;
};

// Reads one layer table's values, each checked for its type and range;
// errors name the layer and the value's line.
class LayerReader {
 public:
  LayerReader(const Parser& parser, const toml::table& table, const KindInfo& kind,
              const std::string& path)
      : parser_(parser),
        table_(table),
        kind_(kind),
        context_("layer " + path + " (" + std::string(kind.name) + "): ") {}

  int64_t line() const { return line_of(table_); }

  template <typename... Args>
  [[noreturn]] void fail(int64_t line, const Args&... args) const {
    parser_.fail(line, context_, args...);
  }
  template <typename... Args>
  [[noreturn]] void fail_at(std::string_view key, const Args&... args) const {
    const toml::node* node = find(key);
    fail(node ? line_of(*node) : line(), args...);
  }

  std::string takes() const {
    if (kind_.keys.empty()) return std::string(kind_.name) + " takes no keys besides type";
    return std::string(kind_.name) + " takes " + join(kind_.keys);
  }

  // Refuses keys the layer type does not take (a typo must not be ignored).
  void check_keys() const {
    for (const auto& [key, node] : table_) {
      const std::string_view name = key.str();
      if (name == "type") continue;
      if (std::find(kind_.keys.begin(), kind_.keys.end(), name) == kind_.keys.end()) {
        fail(static_cast<int64_t>(key.source().begin.line), "unknown key '", name, "' (", takes(),
             ")");
      }
    }
  }

  const toml::node* find(std::string_view key) const {
    TANDEM_CHECK(std::find(kind_.keys.begin(), kind_.keys.end(), key) != kind_.keys.end(), "key '",
                 key, "' is not listed for ", kind_.name, " in kinds()");
    return table_.get(key);
  }

  const toml::node& required(std::string_view key) const {
    const toml::node* node = find(key);
    if (!node) fail(line(), "missing key '", key, "' (", takes(), ")");
    return *node;
  }

  // A size in [1, kMaxSize]; required when there is no fallback.
  int64_t size(std::string_view key, std::optional<int64_t> fallback = std::nullopt) const {
    const toml::node* node = fallback ? find(key) : &required(key);
    if (!node) return *fallback;
    return checked_size(key, *node, 1);
  }

  int64_t checked_size(std::string_view key, const toml::node& node, int64_t minimum) const {
    const auto value = node.value_exact<int64_t>();
    if (!value) fail(line_of(node), key, " must be an integer, got ", value_kind(node));
    if (*value < minimum) {
      fail(line_of(node), key, " must be ", minimum == 1 ? "positive" : "non-negative", ", got ",
           *value);
    }
    if (*value > kMaxSize)
      fail(line_of(node), key, " must be at most ", kMaxSize, ", got ", *value);
    return *value;
  }

  // A finite number (integers accepted); required when there is no fallback.
  double number(std::string_view key, std::optional<double> fallback = std::nullopt) const {
    const toml::node* node = fallback ? find(key) : &required(key);
    if (!node) return *fallback;
    std::optional<double> value;
    if (const auto f = node->value_exact<double>()) value = *f;
    if (const auto i = node->value_exact<int64_t>()) value = static_cast<double>(*i);
    if (!value) fail(line_of(*node), key, " must be a number, got ", value_kind(*node));
    if (!std::isfinite(*value)) fail(line_of(*node), key, " must be finite, got ", *value);
    return *value;
  }

  bool boolean(std::string_view key, bool fallback) const {
    const toml::node* node = find(key);
    if (!node) return fallback;
    const auto value = node->value_exact<bool>();
    if (!value) fail(line_of(*node), key, " must be true or false, got ", value_kind(*node));
    return *value;
  }

  std::optional<std::string> string(std::string_view key, bool is_required) const {
    const toml::node* node = is_required ? &required(key) : find(key);
    if (!node) return std::nullopt;
    const auto value = node->value_exact<std::string>();
    if (!value) fail(line_of(*node), key, " must be a string, got ", value_kind(*node));
    return *value;
  }

  // "none" (when allowed), "relu", "gelu", "gelu_tanh" or "silu".
  kernels::Activation activation(std::string_view key, bool allow_none) const {
    const std::optional<std::string> name = string(key, !allow_none);
    if (!name) return kernels::Activation::none;
    for (const kernels::Activation a :
         {kernels::Activation::relu, kernels::Activation::gelu, kernels::Activation::gelu_tanh,
          kernels::Activation::silu}) {
      if (*name == kernels::activation_name(a)) return a;
    }
    if (*name == "none" && allow_none) return kernels::Activation::none;
    fail_at(key, key, " must be ", allow_none ? "\"none\", " : "",
            "\"relu\", \"gelu\", \"gelu_tanh\" or \"silu\", got \"", *name, "\"");
  }

 private:
  const Parser& parser_;
  const toml::table& table_;
  const KindInfo& kind_;
  std::string context_;
};

// conv2d/max_pool2d: one spatial output size, or an error when the window
// does not fit.
int64_t window_output(const LayerReader& r, const std::vector<int64_t>& input, size_t dim,
                      std::string_view noun, int64_t window, int64_t stride, int64_t padding) {
  const int64_t extent = input[dim] + 2 * padding;
  if (extent < window) {
    r.fail(r.line(), "shrinks the ", dim == 0 ? "height" : "width", " below 1: the ", window, "x",
           window, " ", noun, padding > 0 ? " with padding " + std::to_string(padding) : "",
           " does not fit input ", shape_text(input));
  }
  return (extent - window) / stride + 1;
}

void require_image(const LayerReader& r, const std::vector<int64_t>& input) {
  if (input.size() != 3) {
    r.fail(r.line(), "needs a (height, width, channels) input per example, got ",
           shape_text(input));
  }
}

void parse_dense(const LayerReader& r, LayerDefinition& d) {
  d.units = r.size("units");
  d.activation = r.activation("activation", true);
  d.bias = r.boolean("bias", true);
  // Over the last dimension, like Keras's Dense and PyTorch's Linear.
  d.output_shape = d.input_shape;
  d.output_shape.back() = d.units;
}

void parse_conv2d(const LayerReader& r, LayerDefinition& d) {
  d.units = r.size("filters");
  d.kernel = r.size("kernel");
  d.stride = r.size("stride", 1);
  if (const toml::node* padding = r.find("padding")) {
    if (const auto mode = padding->value_exact<std::string>()) {
      if (*mode == "same") {
        if (d.kernel % 2 == 0) {
          r.fail(line_of(*padding), "padding \"same\" needs an odd kernel, got ", d.kernel,
                 "; give the padding as an integer");
        }
        d.padding = (d.kernel - 1) / 2;
      } else if (*mode != "valid") {
        r.fail(line_of(*padding), "padding must be \"same\", \"valid\" or an integer, got \"",
               *mode, "\"");
      }
    } else if (padding->is_integer()) {
      d.padding = r.checked_size("padding", *padding, 0);
    } else {
      r.fail(line_of(*padding), "padding must be \"same\", \"valid\" or an integer, got ",
             value_kind(*padding));
    }
  }
  d.activation = r.activation("activation", true);
  d.bias = r.boolean("bias", true);
  require_image(r, d.input_shape);
  d.output_shape = {window_output(r, d.input_shape, 0, "kernel", d.kernel, d.stride, d.padding),
                    window_output(r, d.input_shape, 1, "kernel", d.kernel, d.stride, d.padding),
                    d.units};
}

// max_pool2d and avg_pool2d.
void parse_pool2d(const LayerReader& r, LayerDefinition& d) {
  d.kernel = r.size("size");
  d.stride = r.size("stride", d.kernel);
  require_image(r, d.input_shape);
  d.output_shape = {window_output(r, d.input_shape, 0, "window", d.kernel, d.stride, 0),
                    window_output(r, d.input_shape, 1, "window", d.kernel, d.stride, 0),
                    d.input_shape[2]};
}

float parse_eps(const LayerReader& r) {
  const double eps = r.number("eps", 1e-5);
  if (!(static_cast<float>(eps) > 0.0f)) r.fail_at("eps", "eps must be positive, got ", eps);
  // Stored as a float: 1e39 passed as a finite double and became infinity.
  if (!std::isfinite(static_cast<float>(eps)))
    r.fail_at("eps", "eps must be at most ", std::numeric_limits<float>::max(), ", got ", eps);
  return static_cast<float>(eps);
}

void parse_batch_norm(const LayerReader& r, LayerDefinition& d) {
  const double momentum = r.number("momentum", 0.1);
  if (!(momentum >= 0.0 && momentum <= 1.0)) {
    r.fail_at("momentum", "momentum must be in [0, 1], got ", momentum);
  }
  d.momentum = static_cast<float>(momentum);
  d.eps = parse_eps(r);
  d.synchronized = r.boolean("synchronized", false);
  d.activation = r.activation("activation", true);
  if (d.activation != kernels::Activation::none && d.activation != kernels::Activation::relu) {
    r.fail_at("activation",
              "activation must be \"none\" or \"relu\" (fused into the batch "
              "norm), got \"",
              kernels::activation_name(d.activation),
              "\"; put an activation "
              "layer after it");
  }
  d.output_shape = d.input_shape;
}

void parse_global_avg_pool(const LayerReader& r, LayerDefinition& d) {
  require_image(r, d.input_shape);
  d.output_shape = {d.input_shape[2]};
}

// A dropout probability in [0, 1); required when there is no fallback.
float probability(const LayerReader& r, std::string_view key,
                  std::optional<double> fallback = std::nullopt) {
  const double value = r.number(key, fallback);
  // Checked as the float the layer keeps: 0.99999999 rounds to 1.
  const float p = static_cast<float>(value);
  if (!(p >= 0.0f && p < 1.0f)) r.fail_at(key, key, " must be in [0, 1), got ", value);
  return p;
}

void require_sequence(const LayerReader& r, const std::vector<int64_t>& input,
                      std::string_view hint = "") {
  if (input.size() != 2) {
    r.fail(r.line(), "needs a (positions, width) input per example, got ", shape_text(input), hint);
  }
}

void parse_position_embedding(const LayerReader& r, LayerDefinition& d) {
  require_sequence(r, d.input_shape, "; put it after an embedding");
  d.output_shape = d.input_shape;
}

void parse_attention(const LayerReader& r, LayerDefinition& d) {
  d.heads = r.size("heads");
  d.rate = probability(r, "dropout", 0.0);
  require_sequence(r, d.input_shape);
  if (d.input_shape[1] % d.heads != 0) {
    r.fail_at("heads", "width ", d.input_shape[1], " is not divisible by heads ", d.heads);
  }
  d.output_shape = d.input_shape;
}

void parse_dropout(const LayerReader& r, LayerDefinition& d) {
  d.rate = probability(r, "rate");
  d.output_shape = d.input_shape;
}

void parse_embedding(const LayerReader& r, LayerDefinition& d, const Flow& flow) {
  d.vocabulary = r.size("vocabulary");
  d.units = r.size("dim");
  if (!flow.ids) {
    r.fail(r.line(), "needs i32 token ids as input, got f32 values ", shape_text(d.input_shape),
           "; declare input_dtype = \"i32\" and put the embedding first");
  }
  if (d.input_shape.size() + 1 > kMaxRank) {
    r.fail(r.line(), "adds a dimension to ", shape_text(d.input_shape), ", past the most (",
           kMaxRank, ") an example may have");
  }
  d.output_shape = d.input_shape;
  d.output_shape.push_back(d.units);
}

ModelDefinition Parser::parse(std::string_view text) const {
  toml::table root;
  try {
    root = tandem::detail::parse_toml(text, source_);
  } catch (const toml::parse_error& e) {
    fail(static_cast<int64_t>(e.source().begin.line), "", "invalid TOML: ", e.description());
  }
  static const std::vector<std::string_view> kTopKeys = {"name", "input_shape", "input_dtype",
                                                         "layers"};
  for (const auto& [key, node] : root) {
    if (std::find(kTopKeys.begin(), kTopKeys.end(), key.str()) == kTopKeys.end()) {
      fail(static_cast<int64_t>(key.source().begin.line), "", "unknown key '", key.str(),
           "' (a model file holds name, input_shape, input_dtype and [[layers]])");
    }
  }

  ModelDefinition definition;
  if (const toml::node* name = root.get("name")) {
    const auto value = name->value_exact<std::string>();
    if (!value) fail(line_of(*name), "", "name must be a string, got ", value_kind(*name));
    if (value->empty()) fail(line_of(*name), "", "name must not be empty");
    definition.name = *value;
  } else {
    definition.name = std::filesystem::path(std::string(source_)).stem().string();
    if (definition.name.empty()) definition.name = "model";
  }

  const toml::node* input_shape = root.get("input_shape");
  if (!input_shape) {
    fail(0, "", "missing input_shape, the per-example input shape (e.g. [28, 28, 1] or [T])");
  }
  definition.input_shape = parse_input_shape(*input_shape);

  if (const toml::node* dtype = root.get("input_dtype")) {
    const auto value = dtype->value_exact<std::string>();
    if (value == "f32") {
      definition.input_dtype = DType::f32;
    } else if (value == "i32") {
      definition.input_dtype = DType::i32;
    } else {
      fail(line_of(*dtype), "", "input_dtype must be \"f32\" or \"i32\", got ",
           value ? "\"" + *value + "\"" : std::string(value_kind(*dtype)));
    }
  }

  const toml::node* layers = root.get("layers");
  if (!layers) fail(0, "", "no layers: give each layer as a [[layers]] table");
  if (!layers->is_array()) {
    fail(line_of(*layers), "", "layers must be an array of tables ([[layers]]), got ",
         value_kind(*layers));
  }
  if (layers->as_array()->empty()) fail(line_of(*layers), "", "layers is empty");
  Flow flow{.shape = definition.input_shape, .ids = definition.input_dtype == DType::i32};
  definition.layers = parse_layers(*layers->as_array(), "", flow);
  return definition;
}

std::vector<int64_t> Parser::parse_input_shape(const toml::node& node) const {
  const toml::array* dims = node.as_array();
  if (!dims) {
    fail(line_of(node), "", "input_shape must be an array of positive integers, got ",
         value_kind(node));
  }
  if (dims->empty() || dims->size() > kMaxRank) {
    fail(line_of(node), "", "input_shape must have 1 to ", kMaxRank, " dimensions, got ",
         dims->size());
  }
  std::vector<int64_t> shape;
  for (const toml::node& d : *dims) {
    const auto value = d.value_exact<int64_t>();
    if (!value || *value < 1 || *value > kMaxSize) {
      fail(line_of(d), "", "input_shape must hold positive integers (at most ", kMaxSize, "), got ",
           value ? std::to_string(*value) : std::string(value_kind(d)));
    }
    shape.push_back(*value);
  }
  if (!element_count(shape)) {
    fail(line_of(node), "", "input_shape ", shape_text(shape), " has more than ", kMaxElements,
         " elements");
  }
  return shape;
}

std::vector<LayerDefinition> Parser::parse_layers(const toml::array& array,
                                                  const std::string& prefix, Flow& flow) const {
  std::vector<LayerDefinition> layers;
  for (size_t i = 0; i < array.size(); ++i) {
    const std::string path = (prefix.empty() ? "" : prefix + ".") + std::to_string(i);
    const toml::node& node = *array.get(i);
    if (!node.is_table()) {
      fail(line_of(node), "layer " + path + ": ", "must be a table, got ", value_kind(node));
    }
    layers.push_back(parse_layer(*node.as_table(), path, flow));
  }
  return layers;
}

LayerDefinition Parser::parse_layer(const toml::table& table, const std::string& path,
                                    Flow& flow) const {
  const std::string context = "layer " + path + ": ";
  const toml::node* type = table.get("type");
  if (!type) {
    fail(line_of(table), context, "missing key 'type' (one of ", join(layer_kind_names()), ")");
  }
  const auto name = type->value_exact<std::string>();
  if (!name) fail(line_of(*type), context, "type must be a string, got ", value_kind(*type));
  const auto kind = std::find_if(kinds().begin(), kinds().end(),
                                 [&](const KindInfo& k) { return k.name == *name; });
  if (kind == kinds().end()) {
    fail(line_of(*type), "layer " + path + " (" + *name + "): ", "unknown layer type '", *name,
         "' (expected one of ", join(layer_kind_names()), ")");
  }

  const LayerReader r(*this, table, *kind, path);
  r.check_keys();
  LayerDefinition d{.kind = kind->kind, .path = path, .line = r.line(), .input_shape = flow.shape};
  if (flow.ids && d.kind != LayerKind::embedding) {
    r.fail(r.line(), "needs floating-point input, but the model's input is i32 token ids ",
           shape_text(d.input_shape), ", which only an embedding layer takes");
  }
  switch (d.kind) {
    case LayerKind::dense:
      parse_dense(r, d);
      break;
    case LayerKind::conv2d:
      parse_conv2d(r, d);
      break;
    case LayerKind::max_pool2d:
      parse_pool2d(r, d);
      break;
    case LayerKind::batch_norm:
      parse_batch_norm(r, d);
      break;
    case LayerKind::layer_norm:
      d.eps = parse_eps(r);
      d.output_shape = d.input_shape;
      break;
    case LayerKind::dropout:
      parse_dropout(r, d);
      break;
    case LayerKind::flatten:
      d.output_shape = {*element_count(d.input_shape)};
      break;
    case LayerKind::embedding:
      parse_embedding(r, d, flow);
      break;
    case LayerKind::activation:
      d.activation = r.activation("function", false);
      d.output_shape = d.input_shape;
      break;
    case LayerKind::residual: {
      const auto inner_layers = [&](std::string_view key, const std::string& prefix,
                                    Flow& inner_flow) {
        const toml::node& inner = r.required(key);
        const toml::array* array = inner.as_array();
        if (!array) {
          r.fail(line_of(inner), key, " must be an array of layer tables, got ", value_kind(inner));
        }
        if (array->empty()) r.fail(line_of(inner), key, " is empty");
        return parse_layers(*array, prefix, inner_flow);
      };
      Flow body = flow, skip = flow;
      d.layers = inner_layers("layers", path, body);
      if (r.find("shortcut")) d.shortcut = inner_layers("shortcut", path + ".shortcut", skip);
      if (body.shape != skip.shape) {
        r.fail(r.line(), "its layers map ", shape_text(d.input_shape), " to ",
               shape_text(body.shape), " and its shortcut to ", shape_text(skip.shape),
               "; a residual block's two paths must give the same shape");
      }
      d.activation = r.activation("activation", true);
      d.recompute = r.boolean("recompute", false);
      d.output_shape = body.shape;
      break;
    }
    case LayerKind::avg_pool2d:
      parse_pool2d(r, d);
      break;
    case LayerKind::global_avg_pool:
      parse_global_avg_pool(r, d);
      break;
    case LayerKind::position_embedding:
      parse_position_embedding(r, d);
      break;
    case LayerKind::attention:
      parse_attention(r, d);
      break;
  }
  if (!element_count(d.output_shape)) {
    r.fail(r.line(), "its output ", shape_text(d.output_shape), " has more than ", kMaxElements,
           " elements per example");
  }
  if (!weight_elements(d))
    r.fail(r.line(), "its weights have more than ", kMaxElements, " elements");
  flow = {.shape = d.output_shape, .ids = false};
  return d;
}

}  // namespace

std::string_view layer_kind_name(LayerKind kind) {
  return info(kind).name;
}

std::vector<std::string_view> layer_kind_names() {
  std::vector<std::string_view> names;
  for (const KindInfo& k : kinds()) names.push_back(k.name);
  return names;
}

std::vector<std::string_view> layer_keys(LayerKind kind) {
  return info(kind).keys;
}

std::vector<int64_t> ModelDefinition::output_shape() const {
  return layers.empty() ? input_shape : layers.back().output_shape;
}

ModelDefinition parse_model_definition(std::string_view text, std::string_view source) {
  return Parser(source).parse(text);
}

}  // namespace tandem::nn
