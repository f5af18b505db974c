#include "tandem/interop/torch_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <span>

#include "tandem/base/error.h"
#include "tandem/kernels/layout.h"
#include "tandem/train/trainer.h"

namespace tandem::interop {
namespace {

Shape permuted(const Shape& shape, const std::vector<int>& axes) {
  if (axes.empty()) return shape;
  std::vector<int64_t> dims;
  for (int a : axes) dims.push_back(shape.dim(a));
  return Shape(dims);
}

bool is_float(DType d) {
  return d == DType::f32 || d == DType::bf16 || d == DType::f16;
}

// A file dtype that loads into a tensor of `target` without losing values.
bool loads_into(const std::string& file_dtype, DType target) {
  if (target == DType::f32)
    return file_dtype == "F32" || file_dtype == "BF16" || file_dtype == "F16";
  return file_dtype == safetensors_dtype(target);
}

std::string describe(const std::string& dtype, const std::vector<int64_t>& shape) {
  return fmt::format("{} ({})", dtype, fmt::join(shape, ", "));
}

std::string listed(const char* what, const std::vector<std::string>& names) {
  if (names.empty()) return "";
  constexpr size_t kShown = 20;
  std::string out = fmt::format("; {} ({}): ", what, names.size());
  for (size_t i = 0; i < names.size() && i < kShown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > kShown) out += fmt::format(", and {} more", names.size() - kShown);
  return out;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> torch_state(nn::Module& model, DType dtype) {
  if (!is_float(dtype)) {
    TANDEM_THROW(InvalidArgument, "weights export as f32, bf16 or f16, not ", dtype_name(dtype));
  }
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<std::string> overflowing;
  for (nn::Module::StateTensor& s : model.named_state()) {
    Tensor t = s.value;
    if (!s.torch_axes.empty()) t = kernels::permute(t, s.torch_axes);
    // f16 holds magnitudes up to 65504: a larger finite weight (a batch
    // norm's running variance) became inf without a word.
    if (dtype == DType::f16 && t.dtype() == DType::f32) {
      const std::span<const float> values(t.data<float>(), static_cast<size_t>(t.numel()));
      if (std::any_of(values.begin(), values.end(),
                      [](float v) { return std::isfinite(v) && std::fabs(v) > 65504.0f; }))
        overflowing.push_back(s.name);
    }
    if (is_float(t.dtype()) && t.dtype() != dtype) t = t.to(dtype);
    out.emplace_back(s.name, std::move(t));
  }
  if (!overflowing.empty()) {
    TANDEM_THROW(InvalidArgument, "f16 cannot hold every weight (values past 65504)",
                 listed("in", overflowing), "; export as f32 or bf16");
  }
  return out;
}

void save_safetensors(nn::Module& model, const std::string& path, DType dtype,
                      std::map<std::string, std::string> metadata) {
  metadata.emplace("format", "pt");
  write_safetensors(path, torch_state(model, dtype), metadata);
}

LoadReport load_safetensors(const SafetensorsFile& file, nn::Module& model,
                            const LoadOptions& options) {
  struct Planned {
    nn::Module::StateTensor* target;
    const SafetensorsEntry* entry;
  };
  std::vector<nn::Module::StateTensor> state = model.named_state();
  LoadReport report;
  std::vector<std::string> mismatched;
  std::vector<Planned> plan;
  std::set<std::string> names;
  for (nn::Module::StateTensor& s : state) {
    names.insert(s.name);
    const SafetensorsEntry* e = file.find(s.name);
    if (e == nullptr) {
      report.missing.push_back(s.name);
      continue;
    }
    const Shape expected = permuted(s.value.shape(), s.torch_axes);
    if (e->shape != expected.to_vector() || !loads_into(e->dtype, s.value.dtype())) {
      mismatched.push_back(fmt::format(
          "{} (file {}, model {} in PyTorch's layout)", s.name, describe(e->dtype, e->shape),
          describe(safetensors_dtype(s.value.dtype()), expected.to_vector())));
      continue;
    }
    plan.push_back({&s, e});
  }
  for (const SafetensorsEntry& e : file.entries()) {
    if (names.count(e.name)) continue;
    // PyTorch's BatchNorm counts its batches; tandem's momentum needs no count.
    const std::string counter = ".num_batches_tracked";
    if (e.name.ends_with(counter) &&
        names.count(e.name.substr(0, e.name.size() - counter.size()) + ".running_mean")) {
      report.ignored.push_back(e.name);
      continue;
    }
    report.unexpected.push_back(e.name);
  }
  const bool refused = !mismatched.empty() ||
                       (options.strict && (!report.missing.empty() || !report.unexpected.empty()));
  if (refused) {
    TANDEM_THROW(
        InvalidArgument, "'", file.path(), "' does not match the model",
        options.strict ? " (strict loading)" : "",
        listed("missing: the model's, not in the file", report.missing),
        listed("unexpected: in the file, not the model", report.unexpected),
        listed("mismatched shape or dtype", mismatched),
        mismatched.empty() ? " (non-strict loading skips missing and unexpected tensors)" : "");
  }
  // Nothing in common: another model's file, which non-strict loading took
  // silently (and --quiet hid the report), training from random weights.
  if (plan.empty() && !report.missing.empty()) {
    TANDEM_THROW(InvalidArgument, "'", file.path(),
                 "' shares no tensor with the model (non-strict loading would load nothing)",
                 listed("missing: the model's, not in the file", report.missing),
                 listed("unexpected: in the file, not the model", report.unexpected));
  }
  for (const Planned& p : plan) {
    Tensor t = file.read(*p.entry);
    if (t.dtype() != p.target->value.dtype()) t = t.to(p.target->value.dtype());
    if (!p.target->torch_axes.empty())
      t = kernels::permute(t, kernels::inverse_permutation(p.target->torch_axes));
    p.target->value.copy_from(t);
    if (p.target->parameter) p.target->parameter->mark_modified();
    report.loaded.push_back(p.target->name);
  }
  return report;
}

LoadReport load_safetensors(const SafetensorsFile& file, train::Trainer& trainer,
                            const LoadOptions& options) {
  // Replica 0 reads the file (and refuses it before any replica changes); the
  // others, of the same architecture, copy replica 0's tensors.
  LoadReport report = load_safetensors(file, trainer.replica_model(0), options);
  const std::vector<nn::Module::StateTensor> loaded = trainer.replica_model(0).named_state();
  for (int r = 1; r < trainer.strategy().local_replicas(); ++r) {
    std::vector<nn::Module::StateTensor> state = trainer.replica_model(r).named_state();
    for (size_t i = 0; i < state.size(); ++i) {
      state[i].value.copy_from(loaded[i].value);
      if (state[i].parameter) state[i].parameter->mark_modified();
    }
  }
  return report;
}

}  // namespace tandem::interop
