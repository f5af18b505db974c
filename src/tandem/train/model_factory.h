#pragma once
// ModelFactory: what builds a model (one call per replica) together with
// what rebuilds it (ModelSpec): the architecture, its precision and its
// initialisation seed. The Trainer records the spec in checkpoints, refuses
// a resume under another spec, and `tandem evaluate` rebuilds the model from
// it, so a checkpoint never carries a label the trainer cannot check.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "tandem/distribute/engine.h"
#include "tandem/precision/policy.h"

namespace tandem::train {

struct ModelSpec {
  // "cnn", "mlp" (built-ins), a model file's name, or a program's label.
  std::string name;
  // A model file's text; empty for built-ins and for models a program builds.
  std::string definition;
  precision::Policy policy = precision::Policy::float32;
  DType compute_dtype = DType::f32;  // the matmul/conv operand dtype
  uint64_t seed = 0;                 // initialisation
  // False for models a program builds: only built-ins and model files can be
  // rebuilt from the spec alone.
  bool rebuildable = false;

  bool operator==(const ModelSpec&) const = default;
};

struct ModelFactory {
  ModelSpec spec;
  distribute::ModelBuilder build;
};

// A built-in model (nn::make_model: cnn, mlp) under a precision policy; the
// compute dtype defaults to the policy's (precision::matrix_dtype). Throws
// InvalidArgument for an unknown name.
ModelFactory builtin_model(const std::string& name,
                           precision::Policy policy = precision::global_policy(),
                           uint64_t seed = 0, std::optional<DType> compute_dtype = std::nullopt);

// A model a program builds; `name` labels it in checkpoints and summaries,
// `policy` is the one its layers were built with (it picks the default loss
// scaling).
ModelFactory custom_model(std::string name, distribute::ModelBuilder build,
                          precision::Policy policy = precision::global_policy());

// The factory a spec describes (built-ins and model files); throws
// InvalidArgument for a spec that is not rebuildable.
ModelFactory rebuild_model(const ModelSpec& spec);

// The spec as checkpoint metadata ("model", "model_definition", "precision",
// "compute_dtype", "model_seed", "model_rebuildable") and back; read_spec
// throws IoError for missing or malformed entries.
void write_spec(const ModelSpec& spec, std::map<std::string, std::string>& metadata);
ModelSpec read_spec(const std::map<std::string, std::string>& metadata);

}  // namespace tandem::train
