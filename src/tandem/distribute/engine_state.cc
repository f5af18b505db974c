#include "tandem/distribute/engine_state.h"

#include "tandem/base/error.h"
#include "tandem/base/parse_number.h"

namespace tandem::distribute {
namespace {

template <typename T>
T parse_whole(const std::string& text, const std::string& key, const char* kind) {
  const std::optional<T> value = parse_number<T>(text);
  if (!value) {
    TANDEM_THROW(IoError, "checkpoint metadata '", key, "' holds '", text.substr(0, 40), "', not ",
                 kind);
  }
  return *value;
}

}  // namespace

const Tensor& EngineState::tensor(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  TANDEM_THROW(IoError, "checkpoint has no tensor '", name, "'");
}

bool EngineState::has_tensor(const std::string& name) const {
  for (const auto& entry : tensors) {
    if (entry.first == name) return true;
  }
  return false;
}

void EngineState::check_loads_into(const std::string& name, const Tensor& target) const {
  const Tensor& saved = tensor(name);
  if (saved.shape() != target.shape() || saved.dtype() != target.dtype()) {
    TANDEM_THROW(IoError, "checkpoint tensor '", name, "' is ", saved.to_string(), ", expected ",
                 target.to_string());
  }
}

void EngineState::load_into(const std::string& name, Tensor& target) const {
  check_loads_into(name, target);
  target.copy_from(tensor(name));
  // On a GPU the copy is queued on this thread's stream; the replica
  // threads that use the tensor next queue on their own.
  synchronize(target.device());
}

const std::string& EngineState::meta(const std::string& key) const {
  auto it = metadata.find(key);
  if (it == metadata.end()) TANDEM_THROW(IoError, "checkpoint has no metadata '", key, "'");
  return it->second;
}

int64_t EngineState::meta_integer(const std::string& key) const {
  return parse_whole<int64_t>(meta(key), key, "an integer");
}

uint64_t EngineState::meta_unsigned(const std::string& key) const {
  return parse_whole<uint64_t>(meta(key), key, "an unsigned integer");
}

double EngineState::meta_number(const std::string& key) const {
  return parse_whole<double>(meta(key), key, "a number");
}

std::vector<TensorLayout> layout_of(const EngineState& state) {
  std::vector<TensorLayout> layout;
  for (const auto& [name, t] : state.tensors) layout.push_back({name, t.shape(), t.dtype()});
  return layout;
}

void write_state(const EngineState& state, StateWriter& writer) {
  writer.begin(state.metadata, layout_of(state));
  for (const auto& [name, t] : state.tensors) writer.put(name, t);
}

void save_model_state(nn::Module& model, EngineState& state) {
  for (const auto& [name, p] : model.named_parameters())
    state.tensors.emplace_back("model." + name, p.value());
  for (const auto& [name, t] : model.named_buffers())
    state.tensors.emplace_back("buffer." + name, *t);
}

void check_model_state(const EngineState& state, nn::Module& model) {
  for (auto& [name, p] : model.named_parameters())
    state.check_loads_into("model." + name, p.value());
  for (auto& [name, t] : model.named_buffers()) state.check_loads_into("buffer." + name, *t);
}

void load_model_state(const EngineState& state, nn::Module& model) {
  for (auto& [name, p] : model.named_parameters()) {
    Tensor value = p.value();
    state.load_into("model." + name, value);
    p.mark_modified();
  }
  for (auto& [name, t] : model.named_buffers()) state.load_into("buffer." + name, *t);
}

}  // namespace tandem::distribute
