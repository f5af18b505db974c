#pragma once
// Define-by-run automatic differentiation. Every differentiable op records a
// Node holding its backward function and the edges to its inputs; backward()
// runs the recorded nodes in reverse order of creation (a valid topological
// order: an op is always recorded after the ops that produced its inputs),
// summing gradients of values used more than once. A leaf (e.g. a parameter)
// reports through its gradient-ready hooks the moment its gradient is final,
// which lets a later reducer start all-reducing while backward continues.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/tensor/tensor.h"

namespace tandem {

class Variable;
struct Node;
struct VariableImpl;

// A gradient-ready hook: called once per backward() for a leaf that requires
// grad, after every contribution to its gradient has been accumulated (also
// when none was: then has_grad() is false).
using GradReadyHook = std::function<void(Variable&)>;

class Variable {
 public:
  Variable() = default;  // undefined
  explicit Variable(Tensor value, bool requires_grad = false);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& value() const;
  // Replaces the value in place (optimizers, checkpoint loading). Shape and
  // dtype must not change; use under no-grad.
  void set_value(const Tensor& value);
  // A counter that changes whenever the value is modified through the API
  // (set_value, mark_modified): layers cache derived copies (e.g. bf16 weights)
  // against it. Code that writes the value's memory directly calls mark_modified().
  uint64_t version() const;
  void mark_modified() const;
  // The value converted to dtype; cached on the variable until its version
  // changes, so a layer casts its weights once per step however often it is
  // used (Keras mixed precision). Returns the value itself for its own dtype.
  Tensor value_as(DType dtype) const;
  const Shape& shape() const { return value().shape(); }
  DType dtype() const { return value().dtype(); }

  bool requires_grad() const;
  void set_requires_grad(bool requires_grad);
  // True when no op produced this variable (parameters, inputs).
  bool is_leaf() const;

  // The accumulated gradient of a leaf, or an undefined tensor when none has
  // been accumulated since the last zero_grad().
  Tensor grad() const;
  bool has_grad() const;
  // The tensor gradients accumulate into (allocated on first use, in the
  // gradients category). A reducer may install a view into a fusion bucket.
  const Tensor& grad_buffer() const;
  void set_grad_buffer(const Tensor& buffer);
  // Forgets the accumulated gradient (the buffer is kept and overwritten by
  // the next backward's first contribution).
  void zero_grad();
  // Forgets the gradient and drops the buffer (ZeRO-2 releases each
  // gradient once it is copied out for reduction; the next contribution
  // allocates a new one).
  void release_grad_buffer();
  // Adds g into the gradient (copies on the first contribution).
  void accumulate_grad(const Tensor& g);
  // Declares the gradient buffer's current contents the accumulated gradient
  // (a reducer does this after writing all-reduced values into it).
  void define_grad();

  // Back-propagates from this variable. The no-argument form needs a
  // one-element value and seeds the gradient with 1. Frees the graph's saved
  // tensors; a second backward through the same graph throws.
  void backward() const;
  void backward(const Tensor& grad_output) const;

  void add_grad_ready_hook(GradReadyHook hook);
  void clear_grad_ready_hooks();

  const std::string& name() const;
  void set_name(const std::string& name);

  // The same value without history.
  Variable detach() const;

  // Low level: a handle sharing an existing variable's state.
  static Variable from_impl(std::shared_ptr<VariableImpl> impl);
  VariableImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<VariableImpl>& shared_impl() const { return impl_; }
  const std::shared_ptr<Node>& grad_fn() const;

 private:
  std::shared_ptr<VariableImpl> impl_;
};

// Whether ops record the graph on this thread (default true).
bool grad_enabled();
void set_grad_enabled(bool enabled);

// Disables recording for its scope (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace tandem
