#include "tandem/autograd/checkpoint.h"

#include "tandem/autograd/node.h"
#include "tandem/base/error.h"
#include "tandem/base/random.h"

namespace tandem {
namespace {

thread_local int recompute_depth = 0;

// What a recomputation runs under, restored as one unit when it ends: grad
// mode on, recomputing() true, and the thread generator at the state the
// first pass started from.
class RecomputeScope {
 public:
  RecomputeScope(uint64_t seed, uint64_t offset)
      : generator_(thread_generator()),
        seed_(generator_.seed()),
        offset_(generator_.offset()),
        grad_was_(grad_enabled()) {
    ++recompute_depth;
    set_grad_enabled(true);
    generator_.set_state(seed, offset);
  }
  ~RecomputeScope() {
    generator_.set_state(seed_, offset_);
    set_grad_enabled(grad_was_);
    --recompute_depth;
  }
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  Generator& generator_;
  uint64_t seed_, offset_;
  bool grad_was_;
};

}  // namespace

bool recomputing() {
  return recompute_depth > 0;
}

Variable checkpoint(const CheckpointFn& fn, const Variable& input) {
  if (!fn) TANDEM_THROW(InvalidArgument, "checkpoint needs a function");
  if (!grad_enabled()) return fn(input);
  const Generator& generator = thread_generator();
  const uint64_t seed = generator.seed(), offset = generator.offset();
  Tensor output;
  {
    NoGradGuard no_grad;  // nothing recorded: the block's activations are freed as it goes
    output = fn(input).value();
  }
  return record_op_always(
      "checkpoint", output, {&input}, [fn, x = input.value(), seed, offset](BackwardContext& ctx) {
        // The input as a leaf of the recomputed graph; its gradient is an
        // activation's, not a parameter's.
        Variable leaf(x, true);
        leaf.set_grad_buffer(
            Tensor::empty(x.shape(), x.dtype(), x.device(), MemoryCategory::activations));
        Variable y;
        {
          RecomputeScope recompute(seed, offset);
          y = fn(leaf);
        }
        if (!y.requires_grad()) return;  // nothing in the block needs a gradient
        // The block's parameters receive their gradients (and fire their
        // hooks) here; the input's goes on to the rest of the graph.
        y.backward(ctx.grad_output());
        if (ctx.needs(0) && leaf.has_grad()) ctx.set(0, leaf.grad());
      });
}

}  // namespace tandem
