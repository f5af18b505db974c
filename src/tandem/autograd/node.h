#pragma once
// The building block for differentiable ops: record_op() wraps an op's output
// in a Variable and, when gradients are needed, records a Node with its
// backward function. New ops are written against this header.

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "tandem/autograd/variable.h"

namespace tandem {

// What backward functions see: the gradient of the op's output, which inputs
// need a gradient, and where to put them.
class BackwardContext {
 public:
  BackwardContext(const Tensor& grad_output, const std::vector<bool>& needs,
                  std::vector<Tensor>& grads, const std::vector<Tensor>* destinations = nullptr)
      : grad_output_(grad_output), needs_(needs), grads_(grads), destinations_(destinations) {}

  const Tensor& grad_output() const { return grad_output_; }
  bool needs(size_t input) const { return needs_[input]; }
  // Sets input i's gradient (must have that input's shape and dtype).
  void set(size_t input, Tensor grad) { grads_[input] = std::move(grad); }
  // Where input i's gradient may be written directly: the leaf's gradient
  // buffer (a fusion-bucket view under a reducer) when this is its first
  // contribution; undefined otherwise. A backward that computes into it and
  // passes it to set() saves the copy into the buffer.
  Tensor destination(size_t input) const {
    return destinations_ != nullptr ? (*destinations_)[input] : Tensor();
  }

 private:
  const Tensor& grad_output_;
  const std::vector<bool>& needs_;
  std::vector<Tensor>& grads_;
  const std::vector<Tensor>* destinations_;
};

using BackwardFn = std::function<void(BackwardContext&)>;

// An edge from a node to one input: the node that produced it, or the leaf.
struct Edge {
  std::shared_ptr<Node> node;          // set for non-leaf inputs
  std::shared_ptr<VariableImpl> leaf;  // set for leaves that require grad
  Shape shape;
  DType dtype = DType::f32;

  bool active() const { return node != nullptr || leaf != nullptr; }
};

struct Node {
  const char* op = "";
  uint64_t sequence = 0;  // creation order
  std::vector<Edge> inputs;
  BackwardFn backward;  // cleared after it runs, releasing saved tensors
};

// Wraps output as the result of op over inputs. When grad mode is on and some
// input requires grad, the result requires grad and backward is recorded;
// otherwise backward is dropped and nothing is recorded.
Variable record_op(const char* op, Tensor output, std::initializer_list<const Variable*> inputs,
                   BackwardFn backward);
// For a number of inputs known only at run time (concat).
Variable record_op(const char* op, Tensor output, std::span<const Variable* const> inputs,
                   BackwardFn backward);

// Records whenever grad mode is on, even when no input requires grad: for
// an op whose backward reaches parameters the graph does not hold as its
// inputs (checkpoint()).
Variable record_op_always(const char* op, Tensor output,
                          std::initializer_list<const Variable*> inputs, BackwardFn backward);

// Whether an op over these inputs would be recorded (lets ops skip saving
// tensors that only backward needs).
bool records_grad(std::initializer_list<const Variable*> inputs);
bool records_grad(std::span<const Variable* const> inputs);

}  // namespace tandem
