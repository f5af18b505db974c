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
  // A built-in's settings in canonical form (nn::canonical_settings), e.g.
  // "layers=4,width=128"; empty for the defaults and for other models.
  std::string settings;
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
                           precision::Policy policy = precision::Policy::float32, uint64_t seed = 0,
                           std::optional<DType> compute_dtype = std::nullopt,
                           const std::string& settings = "");

// The largest model file model_from_file reads, in bytes.
inline constexpr uint64_t kMaxModelFileBytes = uint64_t{4} << 20;

// A model defined in a TOML file (nn/model_file.h, docs/model_files.md)
// under a precision policy, built as builtin_model builds the built-ins. The
// spec's name is the definition's, its definition the file's text, and it is
// rebuildable. Throws IoError naming the path when the file is missing, not
// a regular file, larger than kMaxModelFileBytes or unreadable, and
// InvalidArgument ("path:line: layer N (type): ...") for a bad definition.
ModelFactory model_from_file(const std::string& path,
                             precision::Policy policy = precision::Policy::float32,
                             uint64_t seed = 0, std::optional<DType> compute_dtype = std::nullopt);

// A model a program builds; `name` labels it in checkpoints and summaries,
// `policy` is the one its layers were built with (it picks the default loss
// scaling).
ModelFactory custom_model(std::string name, distribute::ModelBuilder build,
                          precision::Policy policy = precision::Policy::float32);

// The factory a spec describes: a model file's when spec.definition holds
// one (rebuilt from that text, not from the file), else a built-in's. Throws
// InvalidArgument for a spec that is not rebuildable or whose definition or
// name is invalid.
ModelFactory rebuild_model(const ModelSpec& spec);

// The factory of the model a checkpoint records (read_spec, then
// rebuild_model), bounded by the checkpoint itself: a build that would
// allocate more than twice its tensors' bytes and 64 MiB is stopped with
// IoError before it allocates, so that altered or corrupt settings (a
// vocabulary of millions in a file holding a small model) cannot take the
// machine's memory. Throws as read_spec and rebuild_model.
ModelFactory saved_model(const distribute::EngineState& checkpoint);

// The spec as checkpoint metadata ("model", "model_definition",
// "model_settings" (absent from older checkpoints: none), "precision",
// "compute_dtype", "model_seed", "model_rebuildable") and back; read_spec
// throws IoError for missing or malformed entries.
void write_spec(const ModelSpec& spec, std::map<std::string, std::string>& metadata);
ModelSpec read_spec(const distribute::EngineState& checkpoint);

// What a model takes: one example's shape and dtype (a model file's declared
// input; gpt's context of i32 tokens; the other built-ins' 28 x 28 images,
// resnet's with its channels), and for a language model (gpt, or a model
// file from (T) token ids to (T, V) logits) the vocabulary V, else 0.
struct ModelInput {
  Shape example;
  DType dtype = DType::f32;
  int64_t vocabulary = 0;
  // Images of any height and width (resnet pools globally): `example` is
  // then 28 x 28 with the model's channels, one size among many.
  bool any_image_size = false;
};
ModelInput model_input(const ModelSpec& spec, const nn::Module& model);

}  // namespace tandem::train
