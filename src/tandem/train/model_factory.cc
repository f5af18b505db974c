#include "tandem/train/model_factory.h"

#include "tandem/base/error.h"
#include "tandem/nn/models.h"

namespace tandem::train {

ModelFactory builtin_model(const std::string& name, precision::Policy policy, uint64_t seed,
                           std::optional<DType> compute_dtype) {
  ModelSpec spec{.name = name,
                 .policy = policy,
                 .compute_dtype = compute_dtype.value_or(precision::matrix_dtype(policy)),
                 .seed = seed,
                 .rebuildable = true};
  nn::ModelOptions options = precision::model_options(policy, {.seed = seed});
  options.compute_dtype = spec.compute_dtype;
  nn::make_model(name, options);  // validates the name and options now, not on a replica
  return {spec, [name, options] { return nn::make_model(name, options); }};
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
                 "it with the program (C++ API) and load the checkpoint into it");
  }
  if (!spec.definition.empty()) {
    TANDEM_THROW(NotImplemented, "model files are not supported yet ('", spec.name, "')");
  }
  return builtin_model(spec.name, spec.policy, spec.seed, spec.compute_dtype);
}

void write_spec(const ModelSpec& spec, std::map<std::string, std::string>& metadata) {
  metadata["model"] = spec.name;
  metadata["model_definition"] = spec.definition;
  metadata["precision"] = std::string(precision::policy_name(spec.policy));
  metadata["compute_dtype"] = std::string(dtype_name(spec.compute_dtype));
  metadata["model_seed"] = std::to_string(spec.seed);
  metadata["model_rebuildable"] = spec.rebuildable ? "true" : "false";
}

ModelSpec read_spec(const std::map<std::string, std::string>& metadata) {
  const auto get = [&](const char* key) -> const std::string& {
    auto it = metadata.find(key);
    if (it == metadata.end()) TANDEM_THROW(IoError, "checkpoint has no metadata '", key, "'");
    return it->second;
  };
  ModelSpec spec;
  spec.name = get("model");
  spec.definition = get("model_definition");
  try {
    spec.policy = precision::parse_policy(get("precision"));
    spec.compute_dtype = parse_dtype(get("compute_dtype"));
    spec.seed = std::stoull(get("model_seed"));
  } catch (const IoError&) {
    throw;
  } catch (const std::exception& e) {
    TANDEM_THROW(IoError, "checkpoint's model settings are malformed: ", e.what());
  }
  spec.rebuildable = get("model_rebuildable") == "true";
  return spec;
}

}  // namespace tandem::train
