// `tandem plan scaling`'s step profiles (scaling_profile.h).
#include "tandem/cli/scaling_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>

#include "tandem/autograd/functions.h"
#include "tandem/base/detail/json_integer.h"
#include "tandem/base/error.h"
#include "tandem/base/parse_number.h"
#include "tandem/base/text_file.h"
#include "tandem/cli/commands.h"
#include "tandem/kernels/flops.h"
#include "tandem/monitor/model_flops.h"
#include "tandem/nn/sequential.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/evaluation.h"
#include "tandem/train/model_factory.h"
#include "tandem/train/run_directory.h"

namespace tandem::cli {

using nlohmann::json;

namespace {

constexpr std::uintmax_t kMaxJsonBytes = std::uintmax_t{64} << 20;

// When backward completes each parameter's gradient, as a fraction of
// backward, by the layers' FLOPs where the model is a Sequential whose
// input is known (backward runs its layers last to first, each costing
// twice its forward); empty otherwise (readiness then goes by size).
std::vector<double> ready_by_layers(nn::Module& model, const train::ModelSpec& spec,
                                    const std::vector<std::pair<std::string, Variable> >& params) {
  if (dynamic_cast<nn::Sequential*>(&model) == nullptr) return {};
  const Shape shape = train::model_input(spec, model).example;
  std::vector<double> layer_cost;  // by Sequential child index
  double total = 0.0;
  for (const monitor::LayerFlops& l : monitor::layer_flops(model, shape)) {
    layer_cost.push_back(2.0 * l.forward_flops);
    total += layer_cost.back();
  }
  std::vector<double> ready;
  for (const auto& [name, p] : params) {
    const std::optional<int64_t> layer = parse_number<int64_t>(name.substr(0, name.find('.')));
    if (!layer || *layer < 0 || *layer >= static_cast<int64_t>(layer_cost.size()) || !(total > 0.0))
      return {};
    // Layer l's gradients are complete once layers n-1 .. l have run backward.
    double done = 0.0;
    for (size_t k = static_cast<size_t>(*layer); k < layer_cost.size(); ++k) done += layer_cost[k];
    ready.push_back(done / total);
  }
  return ready;
}

// When backward completes each parameter's gradient, as a fraction of
// backward's FLOPs, measured: one example forward and backward (the sum of
// the outputs as the loss), the matrix kernels' FLOPs executed when each
// parameter's gradient-ready hook fires, on one example of what the model
// takes (train::model_input: images of 0.5, or a whole context of token 1).
std::vector<double> ready_by_traced_backward(
    nn::Module& model, const train::ModelSpec& spec,
    const std::vector<std::pair<std::string, Variable> >& params) {
  const train::ModelInput taken = train::model_input(spec, model);
  std::vector<int64_t> dims = taken.example.to_vector();
  dims.insert(dims.begin(), 1);
  const Tensor input = taken.dtype == DType::i32 ? Tensor::full(Shape(dims), 1.0f, DType::i32)
                                                 : Tensor::full(Shape(dims), 0.5f);
  std::vector<int64_t> ready(params.size(), -1);
  int64_t start = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    Variable p = params[i].second;
    p.add_grad_ready_hook(
        [&ready, &start, i](Variable&) { ready[i] = kernels::flops_executed() - start; });
  }
  const Variable loss = sum(model.forward(Variable(input)));
  start = kernels::flops_executed();
  loss.backward();
  const int64_t total = kernels::flops_executed() - start;
  for (const auto& named : params) {
    Variable p = named.second;
    p.clear_grad_ready_hooks();
  }
  std::vector<double> out;
  for (int64_t flops : ready) {
    if (flops < 0 || total <= 0) return {};  // a parameter the loss did not reach
    out.push_back(static_cast<double>(flops) / static_cast<double>(total));
  }
  return out;
}

// Gradient readiness by size: backward order, each complete when the
// share of the elements up to it is.
void ready_by_size(std::vector<train::StepProfile::Gradient>& gradients) {
  double total = 0.0, done = 0.0;
  for (const auto& g : gradients) total += static_cast<double>(g.elements);
  for (auto& g : gradients) {
    done += static_cast<double>(g.elements);
    g.ready = done / total;
  }
}

}  // namespace

json read_json(const std::string& path, std::string_view what) {
  const std::string text = read_text_file(path, what, kMaxJsonBytes);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    TANDEM_THROW(InvalidArgument, what, " '", path, "' is not valid JSON: ", e.what());
  }
}

double number_at(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number())
    TANDEM_THROW(InvalidArgument, where, " has no number '", key, "'");
  return j[key].get<double>();
}

int64_t count_at(const json& j, const char* key, const std::string& where, int64_t low,
                 int64_t high) {
  number_at(j, key, where);  // there, and a number
  std::optional<int64_t> count;
  try {
    count = tandem::detail::json_integer<int64_t>(j[key], key);
  } catch (const json::exception&) {
    // A fraction, or past int64: refused below with the range.
  }
  if (!count || *count < low || *count > high) {
    TANDEM_THROW(InvalidArgument, where, ": '", key, "' must be a whole number from ", low, " to ",
                 high, ", got ", j[key].dump());
  }
  return *count;
}

namespace {

// A duration in milliseconds, as seconds: finite and not negative.
double seconds_at(const json& j, const char* key, const std::string& where) {
  const double ms = number_at(j, key, where);
  if (!(ms >= 0.0 && ms <= 1e12))
    TANDEM_THROW(InvalidArgument, where, ": '", key, "' must be 0 to 1e12 ms, got ", ms);
  return 1e-3 * ms;
}

}  // namespace

ScalingProfile profile_from_run(const std::string& run_dir) {
  if (!std::filesystem::is_directory(run_dir))
    TANDEM_THROW(InvalidArgument, "run directory '", run_dir, "' does not exist");
  const train::RunDirectory run(run_dir);
  const std::string summary_path = run.summary();
  const json summary = read_json(summary_path, "run summary");
  if (!summary.contains("config") || !summary.contains("monitor") ||
      !summary["monitor"].contains("replicas") || !summary["monitor"]["replicas"].is_array()) {
    TANDEM_THROW(InvalidArgument, "'", summary_path,
                 "' has no monitor section (a run of tandem train without --no-monitor)");
  }
  const json& monitor = summary["monitor"];
  const json& replicas = monitor["replicas"];
  const json& config = summary["config"];
  if (replicas.empty())
    TANDEM_THROW(InvalidArgument, "'", summary_path, "' lists no replicas in its monitor section");
  if (replicas.size() > 1 && config.value("strategy", "") != "mirrored") {
    TANDEM_THROW(InvalidArgument, "'", run_dir, "' ran ", replicas.size(),
                 " replicas with strategy '", config.value("strategy", "?"),
                 "'; profile a one-device run, or a mirrored run "
                 "of the devices of one host (their compute under each other's load)");
  }
  // A mirrored run's replicas: their mean compute is one device's while the
  // host's other devices compute too (shared memory bandwidth and caches,
  // or shared cores); its communication and waits are not the profile's.
  ScalingProfile p;
  double communication = 0.0, idle = 0.0;
  for (const json& r : replicas) {
    p.step.forward += number_at(r, "forward", summary_path);
    p.step.backward += number_at(r, "backward", summary_path);
    p.step.optimizer += number_at(r, "optimizer", summary_path);
    communication += number_at(r, "communication", summary_path);
    idle += number_at(r, "idle", summary_path);
  }
  const auto n = static_cast<double>(replicas.size());
  p.step.forward /= n;
  p.step.backward /= n;
  p.step.optimizer /= n;
  const double step = number_at(monitor, "mean_step_seconds", summary_path);
  p.step.other = std::max(0.0, step - p.step.forward - p.step.backward - p.step.optimizer -
                                   communication / n - idle / n);
  const int64_t batch = count_at(config, "batch_size", summary_path, 1, 1000000000000);
  p.step.examples = batch / static_cast<int64_t>(replicas.size());
  p.devices = static_cast<int>(replicas.size());

  const std::string checkpoint_path = run.checkpoint();
  if (!std::filesystem::exists(checkpoint_path)) {
    TANDEM_THROW(InvalidArgument, "'", run_dir,
                 "' holds no checkpoint.tckpt: not a run directory of tandem train");
  }
  const train::Checkpoint checkpoint = train::load_trainer_checkpoint(checkpoint_path);
  const train::ModelFactory saved = train::saved_model(checkpoint);
  const train::ModelSpec& spec = saved.spec;
  const std::shared_ptr<nn::Module> model = saved.build();
  const auto params = model->named_parameters();
  std::vector<double> ready = ready_by_layers(*model, spec, params);
  p.readiness = "layer FLOPs";
  if (ready.empty()) {
    ready = ready_by_traced_backward(*model, spec, params);
    p.readiness = "the FLOPs of a traced backward";
  }
  for (size_t i = params.size(); i-- > 0;) {  // backward order
    p.step.gradients.push_back({params[i].second.value().numel(), ready.empty() ? 1.0 : ready[i]});
    p.parameters += params[i].second.value().numel();
  }
  if (ready.empty()) {
    ready_by_size(p.step.gradients);
    p.readiness = "size";
  }
  p.model = spec.name;
  return p;
}

// A device and model described by numbers (published speeds, a model not at
// hand): {"model", "examples", "forward_ms", "backward_ms", "optimizer_ms",
// "other_ms", and "gradients" (f32 elements in backward order) or
// "parameters" and "tensors" (that many equal gradients)}.
ScalingProfile profile_from_json(const std::string& path) {
  const json j = read_json(path, "profile");
  ScalingProfile p;
  p.model = j.contains("model") && j["model"].is_string() ? j["model"].get<std::string>() : "model";
  const double examples = number_at(j, "examples", path);
  if (!(examples >= 1.0 && examples <= 1e12))
    TANDEM_THROW(InvalidArgument, "'", path, "': examples must be 1 to 1e12, got ", examples);
  p.step.examples = static_cast<int64_t>(examples);
  p.step.forward = seconds_at(j, "forward_ms", path);
  p.step.backward = seconds_at(j, "backward_ms", path);
  p.step.optimizer = seconds_at(j, "optimizer_ms", path);
  p.step.other = j.contains("other_ms") ? seconds_at(j, "other_ms", path) : 0.0;
  const auto elements = [&](double n) {
    if (!(n >= 1.0 && n <= 1e13))
      TANDEM_THROW(InvalidArgument, "'", path, "': a gradient needs 1 to 1e13 elements, got ", n);
    return static_cast<int64_t>(n);
  };
  if (j.contains("gradients") && j["gradients"].is_array()) {
    if (j["gradients"].size() > 1000000)
      TANDEM_THROW(InvalidArgument, "'", path, "': more than 1,000,000 gradients");
    for (const json& g : j["gradients"]) {
      if (!g.is_number()) TANDEM_THROW(InvalidArgument, "'", path, "': gradients must be numbers");
      p.step.gradients.push_back({elements(g.get<double>()), 1.0});
    }
  } else {
    const double parameters = number_at(j, "parameters", path);
    const double tensors = number_at(j, "tensors", path);
    if (!(tensors >= 1.0 && tensors <= 1e6 && parameters >= tensors && parameters <= 1e15))
      TANDEM_THROW(InvalidArgument, "'", path,
                   "': tensors must be 1 to 1e6, and parameters at least tensors and at most 1e15");
    const auto n = static_cast<int64_t>(tensors);
    const auto total = static_cast<int64_t>(parameters);
    for (int64_t i = 0; i < n; ++i)  // the first takes the remainder
      p.step.gradients.push_back(
          {elements(static_cast<double>(total / n + (i == 0 ? total % n : 0))), 1.0});
  }
  if (p.step.gradients.empty()) TANDEM_THROW(InvalidArgument, "'", path, "' lists no gradients");
  ready_by_size(p.step.gradients);
  for (const auto& g : p.step.gradients) p.parameters += g.elements;
  return p;
}

}  // namespace tandem::cli
