#include "tandem/nn/module.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

#include "tandem/autograd/checkpoint.h"
#include "tandem/base/error.h"
#include "tandem/nn/graph_builder.h"

namespace tandem::nn {
namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

}  // namespace

Variable Module::register_parameter(const std::string& name, Tensor value) {
  for (const auto& [existing, v] : parameters_) {
    if (existing == name) TANDEM_THROW(InvalidArgument, "parameter '", name, "' registered twice");
  }
  Variable parameter(std::move(value), true);
  parameter.set_name(name);
  parameters_.emplace_back(name, parameter);
  return parameter;
}

Tensor& Module::register_buffer(const std::string& name, Tensor value) {
  for (auto& [existing, t] : buffers_) {
    if (existing != name) continue;
    t = std::move(value);
    return t;
  }
  buffers_.emplace_back(name, std::move(value));
  return buffers_.back().second;
}

Variable Module::replace_parameter(const std::string& name, Variable parameter) {
  if (!parameter.requires_grad() || parameter.grad_fn() != nullptr) {
    TANDEM_THROW(InvalidArgument, "parameter '", name,
                 "' must be a leaf tensor that requires gradients");
  }
  parameter.set_name(name);
  for (auto& [existing, v] : parameters_) {
    if (existing != name) continue;
    v = parameter;
    return v;
  }
  parameters_.emplace_back(name, parameter);
  return parameter;
}

std::string Module::registered_as(const std::string& name) const {
  const auto named = [&](const auto& entries) {
    return std::any_of(entries.begin(), entries.end(),
                       [&](const auto& entry) { return entry.first == name; });
  };
  if (named(parameters_)) return "parameter";
  if (named(buffers_)) return "buffer";
  if (named(children_)) return "module";
  return "";
}

bool Module::unregister(const std::string& name) {
  const auto named = [&](const auto& entry) { return entry.first == name; };
  return std::erase_if(parameters_, named) + std::erase_if(buffers_, named) +
             std::erase_if(children_, named) >
         0;
}

Variable Module::replace_parameter(const std::string& name, Tensor value) {
  for (auto& [existing, v] : parameters_) {
    if (existing != name) continue;
    v = Variable(std::move(value), true);
    v.set_name(name);
    return v;
  }
  return register_parameter(name, std::move(value));
}

void Module::register_module(const std::string& name, std::shared_ptr<Module> module) {
  if (!module) TANDEM_THROW(InvalidArgument, "register_module('", name, "') with a null module");
  for (auto& [existing, child] : children_) {
    if (existing == name) {
      child = std::move(module);
      return;
    }
  }
  children_.emplace_back(name, std::move(module));
}

void Module::collect_parameters(const std::string& prefix,
                                std::vector<std::pair<std::string, Variable>>& out) const {
  for (const auto& [name, p] : parameters_) out.emplace_back(join(prefix, name), p);
  for (const auto& [name, child] : children_) child->collect_parameters(join(prefix, name), out);
}

std::vector<std::pair<std::string, Variable>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Variable>> out;
  collect_parameters("", out);
  // A module registered twice (self.b = self.a, or one layer added twice to
  // a Sequential) holds its parameters once, under its first name: listed
  // twice, the optimizer updated them twice a step (PyTorch's rule).
  std::unordered_set<const void*> seen;
  std::erase_if(out, [&](const auto& entry) { return !seen.insert(entry.second.impl()).second; });
  // Full names on the variables make gradient errors name the parameter.
  for (auto& [name, p] : out) p.set_name(name);
  return out;
}

std::vector<Variable> Module::parameters() const {
  std::vector<Variable> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

void Module::collect_buffers(const std::string& prefix,
                             std::vector<std::pair<std::string, Tensor*>>& out) {
  for (auto& [name, t] : buffers_) out.emplace_back(join(prefix, name), &t);
  for (auto& [name, child] : children_) child->collect_buffers(join(prefix, name), out);
}

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers() {
  std::vector<std::pair<std::string, Tensor*>> out;
  collect_buffers("", out);
  std::unordered_set<const Tensor*> seen;  // a shared module's, once (as parameters)
  std::erase_if(out, [&](const auto& entry) { return !seen.insert(entry.second).second; });
  return out;
}

GraphValue Module::to_graph(GraphBuilder&, const GraphValue&) const {
  TANDEM_THROW(InvalidArgument, "layer ", describe(),
               " has no ONNX form (tandem exports its built-in layers and models; a layer of "
               "your own needs a to_graph)");
}

std::vector<int> Module::torch_axes(const std::string&) const {
  return {};
}

void Module::collect_state(const std::string& prefix, bool parameters,
                           std::vector<StateTensor>& out) {
  if (parameters) {
    for (auto& [name, p] : parameters_)
      out.push_back({join(prefix, name), p.value(), p, torch_axes(name)});
  } else {
    for (auto& [name, t] : buffers_) out.push_back({join(prefix, name), t, {}, torch_axes(name)});
  }
  for (auto& [name, child] : children_) child->collect_state(join(prefix, name), parameters, out);
}

std::vector<Module::StateTensor> Module::named_state() {
  std::vector<StateTensor> out;
  collect_state("", true, out);
  collect_state("", false, out);
  return out;
}

int64_t Module::parameter_count() const {
  int64_t count = 0;
  for (const auto& [name, p] : named_parameters()) count += p.value().numel();
  return count;
}

Variable Module::operator()(const Variable& input) {
  if (!recompute_) return forward(input);
  return checkpoint([this](const Variable& x) { return forward(x); }, input);
}

void Module::set_recompute(bool on) {
  if (on && !recomputable()) {
    TANDEM_THROW(InvalidArgument, "cannot recompute '", describe(),
                 "': only blocks whose parameters are their own are recomputed (Transformer, "
                 "ResNet and residual blocks)");
  }
  recompute_ = on;
}

int Module::recompute_blocks() {
  int count = 0;
  for (auto& [name, child] : children_) {
    if (child->recomputable()) {
      child->recompute_ = true;
      ++count;
    } else {
      count += child->recompute_blocks();
    }
  }
  return count;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (auto& [name, p] : parameters_) p.zero_grad();
  for (auto& [name, child] : children_) child->zero_grad();
}

void Module::collect_summary(const std::string& prefix, std::string& out) const {
  if (children_.empty()) {
    int64_t count = 0;
    for (const auto& [name, p] : parameters_) count += p.value().numel();
    out += fmt::format("  {:<6} {:<44} {:>10}\n", prefix.empty() ? "-" : prefix, describe(), count);
    return;
  }
  for (const auto& [name, child] : children_) child->collect_summary(join(prefix, name), out);
}

std::string Module::summary() const {
  std::string out = fmt::format("  {:<6} {:<44} {:>10}\n", "name", "layer", "parameters");
  collect_summary("", out);
  out += fmt::format("  total parameters: {}\n", parameter_count());
  return out;
}

}  // namespace tandem::nn
