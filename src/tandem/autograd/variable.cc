#include "tandem/autograd/variable.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>
#include <unordered_set>

#include "tandem/autograd/node.h"
#include "tandem/base/error.h"
#include "tandem/base/trace.h"
#include "tandem/kernels/elementwise.h"

namespace tandem {

struct VariableImpl {
  Tensor value;
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;
  Tensor grad_buffer;
  bool grad_defined = false;
  std::vector<GradReadyHook> hooks;
  std::string name;
  uint64_t version = 0;
  Tensor cast;  // value_as() cache
  uint64_t cast_version = 0;
};

namespace {

thread_local bool grad_mode_enabled = true;
std::atomic<uint64_t> next_sequence{1};

VariableImpl& checked(const std::shared_ptr<VariableImpl>& impl, const char* what) {
  if (!impl) TANDEM_THROW(Error, "Variable::", what, " on an undefined variable");
  return *impl;
}

void check_gradient(const Tensor& g, const Shape& shape, DType dtype, const char* what,
                    const std::string& name) {
  if (g.shape() != shape || g.dtype() != dtype) {
    TANDEM_THROW(ShapeError, "gradient for ", what, " '", name, "' is ", g.to_string(),
                 ", expected ", dtype_name(dtype), " ", shape.to_string());
  }
}

void fire_hooks(const std::shared_ptr<VariableImpl>& leaf) {
  if (leaf->hooks.empty()) return;
  Variable handle = Variable::from_impl(leaf);
  for (auto& hook : leaf->hooks) hook(handle);
}

// Runs the graph below `root` (which produced the gradient seed).
void run_backward(const std::shared_ptr<Node>& root, const Tensor& seed) {
  // 1. Collect the reachable nodes and count each leaf's incoming edges.
  std::vector<Node*> nodes;
  std::unordered_set<Node*> seen{root.get()};
  std::unordered_map<VariableImpl*, int> leaf_pending;
  std::vector<Node*> stack{root.get()};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    nodes.push_back(node);
    for (const Edge& edge : node->inputs) {
      if (edge.node && seen.insert(edge.node.get()).second) stack.push_back(edge.node.get());
      if (edge.leaf) ++leaf_pending[edge.leaf.get()];
    }
  }
  // 2. Reverse creation order is a topological order of the graph.
  std::sort(nodes.begin(), nodes.end(),
            [](const Node* a, const Node* b) { return a->sequence > b->sequence; });
  std::unordered_map<Node*, Tensor> pending{{root.get(), seed}};
  for (Node* node : nodes) {
    Tensor grad_output;
    if (auto it = pending.find(node); it != pending.end()) {
      grad_output = std::move(it->second);
      pending.erase(it);
    }
    std::vector<Tensor> grads(node->inputs.size());
    if (grad_output.defined()) {
      if (!node->backward) {
        TANDEM_THROW(Error, "backward through '", node->op,
                     "' a second time: the graph's saved tensors were freed by the first");
      }
      std::vector<bool> needs(node->inputs.size());
      for (size_t i = 0; i < needs.size(); ++i) needs[i] = node->inputs[i].active();
      // A leaf's first contribution may be computed straight into its
      // gradient buffer; a leaf used twice by one op gets none (its two
      // results are summed as any others are, not written over each other).
      std::vector<Tensor> destinations(node->inputs.size());
      for (size_t i = 0; i < destinations.size(); ++i) {
        const Edge& edge = node->inputs[i];
        if (!edge.leaf || edge.leaf->grad_defined) continue;
        bool repeated = false;
        for (size_t j = 0; j < destinations.size(); ++j)
          repeated = repeated || (j != i && node->inputs[j].leaf == edge.leaf);
        if (!repeated) destinations[i] = Variable::from_impl(edge.leaf).grad_buffer();
      }
      BackwardContext context(grad_output, needs, grads, &destinations);
      {
        // Each op's backward is a span of its own in a trace: the per-op
        // table of a step's backward (tandem's own op timing).
        const trace::Span span(node->op, "backward op");
        node->backward(context);
      }
      for (size_t i = 0; i < destinations.size(); ++i) {
        if (destinations[i].defined() && grads[i].defined() &&
            grads[i].device_data() == destinations[i].device_data()) {
          // Written in place: the contribution is already in the buffer.
          check_gradient(grads[i], node->inputs[i].shape, node->inputs[i].dtype, "input of",
                         node->op);
          Variable::from_impl(node->inputs[i].leaf).define_grad();
          grads[i] = Tensor();
        }
      }
    }
    node->backward = nullptr;
    // 3. Route each input's gradient: sum into the producing node's pending
    //    gradient, or into the leaf, firing its hooks once it is final.
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      const Edge& edge = node->inputs[i];
      Tensor& g = grads[i];
      if (g.defined()) check_gradient(g, edge.shape, edge.dtype, "input of", node->op);
      if (edge.node && g.defined()) {
        auto [slot, inserted] = pending.try_emplace(edge.node.get(), g);
        if (!inserted) {
          const trace::Span span("gradient sum", "backward op");
          slot->second = kernels::add(slot->second, g);
        }
      } else if (edge.leaf) {
        if (g.defined()) {
          const trace::Span span("gradient accumulation", "backward op");
          Variable::from_impl(edge.leaf).accumulate_grad(g);
        }
        if (--leaf_pending[edge.leaf.get()] == 0) fire_hooks(edge.leaf);
      }
    }
  }
}

}  // namespace

Variable::Variable(Tensor value, bool requires_grad) : impl_(std::make_shared<VariableImpl>()) {
  impl_->value = std::move(value);
  impl_->requires_grad = requires_grad;
}

Variable Variable::from_impl(std::shared_ptr<VariableImpl> impl) {
  Variable v;
  v.impl_ = std::move(impl);
  return v;
}

const Tensor& Variable::value() const {
  return checked(impl_, "value").value;
}

void Variable::set_value(const Tensor& value) {
  VariableImpl& impl = checked(impl_, "set_value");
  if (impl.value.defined() &&
      (value.shape() != impl.value.shape() || value.dtype() != impl.value.dtype())) {
    TANDEM_THROW(ShapeError, "set_value on '", impl.name, "': new value ", value.to_string(),
                 " does not match ", impl.value.to_string());
  }
  impl.value = value;
  ++impl.version;
}

uint64_t Variable::version() const {
  return checked(impl_, "version").version;
}

void Variable::mark_modified() const {
  ++checked(impl_, "mark_modified").version;
}

Tensor Variable::value_as(DType dtype) const {
  VariableImpl& impl = checked(impl_, "value_as");
  if (impl.value.dtype() == dtype) return impl.value;
  if (!impl.cast.defined() || impl.cast.dtype() != dtype || impl.cast_version != impl.version ||
      impl.cast.shape() != impl.value.shape()) {
    impl.cast = impl.value.to(dtype);
    impl.cast_version = impl.version;
  }
  return impl.cast;
}

bool Variable::requires_grad() const {
  return checked(impl_, "requires_grad").requires_grad;
}

void Variable::set_requires_grad(bool requires_grad) {
  VariableImpl& impl = checked(impl_, "set_requires_grad");
  if (impl.grad_fn && !requires_grad) {
    TANDEM_THROW(Error, "set_requires_grad(false) on a non-leaf variable; use detach()");
  }
  impl.requires_grad = requires_grad;
}

bool Variable::is_leaf() const {
  return checked(impl_, "is_leaf").grad_fn == nullptr;
}

Tensor Variable::grad() const {
  const VariableImpl& impl = checked(impl_, "grad");
  return impl.grad_defined ? impl.grad_buffer : Tensor();
}

bool Variable::has_grad() const {
  return checked(impl_, "has_grad").grad_defined;
}

const Tensor& Variable::grad_buffer() const {
  VariableImpl& impl = checked(impl_, "grad_buffer");
  if (!impl.grad_buffer.defined()) {
    impl.grad_buffer = Tensor::empty(impl.value.shape(), impl.value.dtype(), impl.value.device(),
                                     MemoryCategory::gradients);
  }
  return impl.grad_buffer;
}

void Variable::set_grad_buffer(const Tensor& buffer) {
  VariableImpl& impl = checked(impl_, "set_grad_buffer");
  if (buffer.shape() != impl.value.shape() || buffer.dtype() != impl.value.dtype()) {
    TANDEM_THROW(ShapeError, "gradient buffer ", buffer.to_string(), " for '", impl.name,
                 "' must match its value ", impl.value.to_string());
  }
  if (impl.grad_defined && buffer.device_data() != impl.grad_buffer.device_data()) {
    // Keep the gradient accumulated so far.
    Tensor target = buffer;
    target.copy_from(impl.grad_buffer);
  }
  impl.grad_buffer = buffer;
}

void Variable::zero_grad() {
  checked(impl_, "zero_grad").grad_defined = false;
}

void Variable::release_grad_buffer() {
  VariableImpl& impl = checked(impl_, "release_grad_buffer");
  impl.grad_defined = false;
  impl.grad_buffer = Tensor();
}

void Variable::accumulate_grad(const Tensor& g) {
  VariableImpl& impl = checked(impl_, "accumulate_grad");
  check_gradient(g, impl.value.shape(), impl.value.dtype(), "leaf", impl.name);
  if (!impl.grad_defined) {
    Tensor buffer = grad_buffer();  // allocated on first use
    buffer.copy_from(g);
    impl.grad_defined = true;
  } else {
    kernels::add_into(impl.grad_buffer, g);
  }
}

void Variable::define_grad() {
  grad_buffer();  // allocated on first use
  impl_->grad_defined = true;
}

void Variable::backward() const {
  const Tensor& v = value();
  if (v.numel() != 1) {
    TANDEM_THROW(ShapeError, "backward() without a gradient needs a one-element value, got ",
                 v.shape().to_string());
  }
  backward(Tensor::full(v.shape(), 1.0f, v.dtype(), v.device()));
}

void Variable::backward(const Tensor& grad_output) const {
  VariableImpl& impl = checked(impl_, "backward");
  check_gradient(grad_output, impl.value.shape(), impl.value.dtype(), "output", impl.name);
  if (!impl.requires_grad) {
    TANDEM_THROW(Error,
                 "backward() on a variable that does not require grad (no parameter or "
                 "input requiring grad took part, or it was computed under no-grad)");
  }
  if (!impl.grad_fn) {
    from_impl(impl_).accumulate_grad(grad_output);
    fire_hooks(impl_);
    return;
  }
  run_backward(impl.grad_fn, grad_output);
}

void Variable::add_grad_ready_hook(GradReadyHook hook) {
  checked(impl_, "add_grad_ready_hook").hooks.push_back(std::move(hook));
}

void Variable::clear_grad_ready_hooks() {
  checked(impl_, "clear_grad_ready_hooks").hooks.clear();
}

const std::string& Variable::name() const {
  return checked(impl_, "name").name;
}

void Variable::set_name(const std::string& name) {
  checked(impl_, "set_name").name = name;
}

Variable Variable::detach() const {
  return Variable(value(), false);
}

const std::shared_ptr<Node>& Variable::grad_fn() const {
  return checked(impl_, "grad_fn").grad_fn;
}

bool grad_enabled() {
  return grad_mode_enabled;
}

void set_grad_enabled(bool enabled) {
  grad_mode_enabled = enabled;
}

bool records_grad(std::span<const Variable* const> inputs) {
  if (!grad_mode_enabled) return false;
  return std::any_of(inputs.begin(), inputs.end(),
                     [](const Variable* v) { return v && v->defined() && v->requires_grad(); });
}

bool records_grad(std::initializer_list<const Variable*> inputs) {
  return records_grad(std::span<const Variable* const>(inputs.begin(), inputs.size()));
}

Variable record_op(const char* op, Tensor output, std::initializer_list<const Variable*> inputs,
                   BackwardFn backward) {
  return record_op(op, std::move(output),
                   std::span<const Variable* const>(inputs.begin(), inputs.size()),
                   std::move(backward));
}

namespace {

Variable record_node(const char* op, Tensor output, std::span<const Variable* const> inputs,
                     BackwardFn backward) {
  auto node = std::make_shared<Node>();
  node->op = op;
  node->sequence = next_sequence.fetch_add(1, std::memory_order_relaxed);
  node->backward = std::move(backward);
  node->inputs.reserve(inputs.size());
  for (const Variable* input : inputs) {
    Edge edge;
    if (input && input->defined()) {
      edge.shape = input->shape();
      edge.dtype = input->dtype();
      if (input->requires_grad()) {
        if (input->grad_fn()) {
          edge.node = input->grad_fn();
        } else {
          edge.leaf = input->shared_impl();
        }
      }
    }
    node->inputs.push_back(std::move(edge));
  }
  Variable result(std::move(output), true);
  result.shared_impl()->grad_fn = std::move(node);
  return result;
}

}  // namespace

Variable record_op(const char* op, Tensor output, std::span<const Variable* const> inputs,
                   BackwardFn backward) {
  if (!records_grad(inputs)) return Variable(std::move(output), false);
  return record_node(op, std::move(output), inputs, std::move(backward));
}

Variable record_op_always(const char* op, Tensor output,
                          std::initializer_list<const Variable*> inputs, BackwardFn backward) {
  if (!grad_mode_enabled) return Variable(std::move(output), false);
  return record_node(op, std::move(output),
                     std::span<const Variable* const>(inputs.begin(), inputs.size()),
                     std::move(backward));
}

}  // namespace tandem
