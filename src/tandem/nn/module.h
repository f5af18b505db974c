#pragma once
// Module: a layer or model owning Parameters (Variables that require grad),
// buffers (state that is saved but not trained, e.g. running statistics) and
// sub-modules. named_parameters() lists them depth-first in registration
// order with dotted names ("0.weight"), each once (a module registered under
// two names: under its first, as PyTorch does); that order fixes the layout of
// gradient buckets and the names in checkpoints, so it must never depend on
// anything but the model's definition.

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/autograd/variable.h"

namespace tandem::nn {

class GraphBuilder;
struct GraphValue;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Variable forward(const Variable& input) = 0;
  // forward(); with recompute on and gradients recorded, forward() through
  // autograd's checkpoint(): only the input is kept, the rest is computed
  // again in backward. Containers call their children through this.
  Variable operator()(const Variable& input);

  // Activation recomputation (autograd/checkpoint.h) for blocks whose
  // parameters are their own and whose random draws come from the thread
  // generator: Transformer blocks, ResNet basic blocks, model-file residual
  // blocks.
  virtual bool recomputable() const { return false; }
  // Turns recomputation on or off for this module; InvalidArgument for a
  // module that is not recomputable().
  void set_recompute(bool on);
  bool recompute() const { return recompute_; }
  // Turns it on for every recomputable module below this one (not inside
  // one already recomputed) and returns how many.
  int recompute_blocks();

  // One line describing the layer, e.g. "Linear(784 -> 512, relu)".
  virtual std::string describe() const = 0;

  std::vector<std::pair<std::string, Variable>> named_parameters() const;
  std::vector<Variable> parameters() const;
  // Buffers by name; the pointers stay valid for the module's lifetime.
  std::vector<std::pair<std::string, Tensor*>> named_buffers();
  int64_t parameter_count() const;

  // Training mode (dropout active, batch statistics) or evaluation mode.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  void zero_grad();

  // Multi-line summary: each leaf module, its parameter count, the total.
  std::string summary() const;

  // How one of this module's own parameters or buffers is laid out compared
  // with PyTorch's layer of the same kind: the axes of the stored tensor in
  // PyTorch's order (Conv2d stores its weight (KH, KW, C, O), PyTorch
  // (O, C, KH, KW): {3, 2, 0, 1}). Empty: the same layout. Export and
  // import (interop) apply it; training never does.
  virtual std::vector<int> torch_axes(const std::string& local_name) const;

  // Adds this layer's inference computation on x to a graph of standard
  // operators (graph_builder.h; ONNX export) and returns its output. The
  // default throws InvalidArgument naming the layer: layers with an
  // operator form override it.
  virtual GraphValue to_graph(GraphBuilder& graph, const GraphValue& x) const;

  // A parameter or buffer with its full name and PyTorch axes.
  struct StateTensor {
    std::string name;
    Tensor value;                       // shares the parameter's or buffer's storage
    std::optional<Variable> parameter;  // unset for a buffer
    std::vector<int> torch_axes;
  };
  // Parameters (in named_parameters() order, except that a module
  // registered under two names lists its tensors under both, as PyTorch's
  // state_dict does; named_parameters() lists them once), then buffers.
  std::vector<StateTensor> named_state();

 protected:
  // A name registered twice is an error for parameters (InvalidArgument);
  // a module or buffer registered again under a name replaces the first, in
  // its place (PyTorch's rule for `self.fc = ...` assigned twice).
  Variable register_parameter(const std::string& name, Tensor value);
  Tensor& register_buffer(const std::string& name, Tensor value);
  void register_module(const std::string& name, std::shared_ptr<Module> module);
  // register_parameter, replacing a parameter of that name in its place
  // (a Python module's attribute assigned again).
  Variable replace_parameter(const std::string& name, Tensor value);
  // The same with this very variable (a leaf that requires gradients), so
  // that its holder sees the gradients and the updates.
  Variable replace_parameter(const std::string& name, Variable parameter);
  // "parameter", "buffer" or "module" for a name registered here; "" for none.
  std::string registered_as(const std::string& name) const;
  // Forgets the parameter, buffer or module of that name (PyTorch's `del
  // self.fc`); false when there is none.
  bool unregister(const std::string& name);

 private:
  void collect_parameters(const std::string& prefix,
                          std::vector<std::pair<std::string, Variable>>& out) const;
  void collect_buffers(const std::string& prefix,
                       std::vector<std::pair<std::string, Tensor*>>& out);
  void collect_summary(const std::string& prefix, std::string& out) const;
  void collect_state(const std::string& prefix, bool parameters, std::vector<StateTensor>& out);

  std::vector<std::pair<std::string, Variable>> parameters_;
  std::deque<std::pair<std::string, Tensor>> buffers_;  // deque: stable addresses
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  bool recompute_ = false;
};

// Puts a module in evaluation mode while it lives and restores the mode it
// had (evaluating or sampling from a model mid-training must leave it
// training).
class EvalModeScope {
 public:
  explicit EvalModeScope(Module& module) : module_(module), was_training_(module.is_training()) {
    module_.eval();
  }
  ~EvalModeScope() { module_.train(was_training_); }
  EvalModeScope(const EvalModeScope&) = delete;
  EvalModeScope& operator=(const EvalModeScope&) = delete;

 private:
  Module& module_;
  bool was_training_;
};

}  // namespace tandem::nn
