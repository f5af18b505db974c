#include "tandem/train/model_factory.h"

#include "tandem/base/error.h"
#include "tandem/base/text_file.h"
#include "tandem/nn/model_file.h"
#include "tandem/nn/models.h"
#include "tandem/nn/resnet.h"
#include "tandem/nn/transformer.h"
#include "tandem/tensor/allocator.h"

namespace tandem::train {
namespace {

nn::ModelOptions options_for(const ModelSpec& spec) {
  nn::ModelOptions options = precision::model_options(spec.policy, {.seed = spec.seed});
  options.compute_dtype = spec.compute_dtype;
  options.settings = spec.settings;
  return options;
}

// A file model's factory. The options are checked now, not on a replica.
ModelFactory definition_model(ModelSpec spec, nn::ModelDefinition definition) {
  const nn::ModelOptions options = options_for(spec);
  nn::check_model_options(options);
  return {std::move(spec), [definition = std::move(definition), options] {
            return nn::build_model(definition, options);
          }};
}

}  // namespace

ModelFactory builtin_model(const std::string& name, precision::Policy policy, uint64_t seed,
                           std::optional<DType> compute_dtype, const std::string& settings) {
  ModelSpec spec{.name = name,
                 .settings = nn::canonical_settings(name, settings),
                 .policy = policy,
                 .compute_dtype = compute_dtype.value_or(precision::matrix_dtype(policy)),
                 .seed = seed,
                 .rebuildable = true};
  const nn::ModelOptions options = options_for(spec);
  nn::check_model_options(options);  // now, not on a replica
  return {spec, [name, options] { return nn::make_model(name, options); }};
}

ModelFactory model_from_file(const std::string& path, precision::Policy policy, uint64_t seed,
                             std::optional<DType> compute_dtype) {
  std::string text = read_text_file(path, "model file", kMaxModelFileBytes);
  nn::ModelDefinition definition = nn::parse_model_definition(text, path);
  ModelSpec spec{.name = definition.name,
                 .definition = std::move(text),
                 .policy = policy,
                 .compute_dtype = compute_dtype.value_or(precision::matrix_dtype(policy)),
                 .seed = seed,
                 .rebuildable = true};
  return definition_model(std::move(spec), std::move(definition));
}

ModelFactory custom_model(std::string name, distribute::ModelBuilder build,
                          precision::Policy policy) {
  if (!build) TANDEM_THROW(InvalidArgument, "custom_model needs a builder");
  if (name.empty()) TANDEM_THROW(InvalidArgument, "custom_model needs a name");
  return {{.name = std::move(name),
           .policy = policy,
           .compute_dtype = precision::matrix_dtype(policy),
           .rebuildable = false},
          std::move(build)};
}

ModelFactory rebuild_model(const ModelSpec& spec) {
  if (!spec.rebuildable) {
    TANDEM_THROW(InvalidArgument, "model '", spec.name,
                 "' was built by a program, not from a built-in name or a model file; rebuild "
                 "it with the program that built it (C++ or Python) and load the checkpoint "
                 "there (Python: fit with output_dir and resume=True)");
  }
  if (!spec.definition.empty()) {
    // The recorded text, not the file (which may have changed since); its
    // name is the spec's even when the file named none (the default, the
    // file's stem, is not in the text).
    nn::ModelDefinition definition =
        nn::parse_model_definition(spec.definition, "recorded definition of '" + spec.name + "'");
    definition.name = spec.name;
    return definition_model(spec, std::move(definition));
  }
  return builtin_model(spec.name, spec.policy, spec.seed, spec.compute_dtype, spec.settings);
}

ModelFactory saved_model(const distribute::EngineState& checkpoint) {
  ModelFactory factory = rebuild_model(read_spec(checkpoint));
  int64_t held = 0;
  for (const auto& [name, tensor] : checkpoint.tensors)
    held += static_cast<int64_t>(tensor.nbytes());
  // Room for what a build allocates besides its parameters: compute-dtype
  // copies, masks and tables.
  const int64_t budget = 2 * held + (int64_t{64} << 20);
  factory.build = [build = std::move(factory.build), held, budget] {
    const AllocationBudget scope(budget);
    try {
      return build();
    } catch (const AllocationBudget::Exceeded& e) {
      TANDEM_THROW(IoError, "the checkpoint's model settings describe a model larger than the ",
                   held, " bytes of tensors it holds (", e.what(),
                   "): the checkpoint was altered or is corrupt");
    }
  };
  return factory;
}

void write_spec(const ModelSpec& spec, std::map<std::string, std::string>& metadata) {
  metadata["model"] = spec.name;
  metadata["model_definition"] = spec.definition;
  metadata["model_settings"] = spec.settings;
  metadata["precision"] = std::string(precision::policy_name(spec.policy));
  metadata["compute_dtype"] = std::string(dtype_name(spec.compute_dtype));
  metadata["model_seed"] = std::to_string(spec.seed);
  metadata["model_rebuildable"] = spec.rebuildable ? "true" : "false";
}

ModelSpec read_spec(const distribute::EngineState& checkpoint) {
  ModelSpec spec;
  spec.name = checkpoint.meta("model");
  spec.definition = checkpoint.meta("model_definition");
  if (auto it = checkpoint.metadata.find("model_settings"); it != checkpoint.metadata.end())
    spec.settings = it->second;
  try {
    spec.policy = precision::parse_policy(checkpoint.meta("precision"));
    spec.compute_dtype = parse_dtype(checkpoint.meta("compute_dtype"));
  } catch (const InvalidArgument& e) {
    TANDEM_THROW(IoError, "checkpoint's model settings are malformed: ", e.what());
  }
  spec.seed = checkpoint.meta_unsigned("model_seed");
  const std::string& rebuildable = checkpoint.meta("model_rebuildable");
  if (rebuildable != "true" && rebuildable != "false") {
    TANDEM_THROW(IoError, "checkpoint metadata 'model_rebuildable' holds '",
                 rebuildable.substr(0, 40), "', not true or false");
  }
  spec.rebuildable = rebuildable == "true";
  return spec;
}

ModelInput model_input(const ModelSpec& spec, const nn::Module& model) {
  if (!spec.definition.empty()) {
    const nn::ModelDefinition d = nn::parse_model_definition(spec.definition, spec.name);
    ModelInput input{Shape(d.input_shape), d.input_dtype};
    const std::vector<int64_t> out = d.output_shape();
    if (d.input_dtype == DType::i32 && d.input_shape.size() == 1 && out.size() == 2 &&
        out[0] == d.input_shape[0])
      input.vocabulary = out[1];
    return input;
  }
  if (const auto* gpt = dynamic_cast<const nn::Gpt*>(&model))
    return {Shape{gpt->config().context}, DType::i32, gpt->config().vocabulary};
  const auto* resnet = dynamic_cast<const nn::ResNet*>(&model);
  return {.example = Shape{28, 28, resnet != nullptr ? resnet->config().channels : 1},
          .dtype = DType::f32,
          .any_image_size = resnet != nullptr};
}

}  // namespace tandem::train
