#pragma once
// Activation recomputation (gradient checkpointing, PyTorch's
// torch.utils.checkpoint): run a block forward without recording it, keep
// only its input, and run it again with recording during backward, when
// its gradient is needed. The block's saved activations then exist for one
// block at a time instead of for the whole model, for one more forward pass.
//
// Rules a block must follow:
//  1. Its parameters are used only inside it (their gradient-ready hooks
//     fire once, at the end of the recomputed block's backward).
//  2. Its random draws come from thread_generator(): the recomputation
//     restores the generator to where the first pass started, so dropout
//     draws the same masks and the gradients are those of the first pass.
//  3. State it updates in training (batch norm's running statistics) is
//     updated by the first pass only: layers skip such updates while
//     recomputing() is true.

#include <functional>

#include "tandem/autograd/variable.h"

namespace tandem {

using CheckpointFn = std::function<Variable(const Variable&)>;

// fn(input), recomputed during backward instead of keeping what it saved.
// Without grad mode, just fn(input). fn must be deterministic given the
// thread generator's state (see above) and must outlive the graph.
Variable checkpoint(const CheckpointFn& fn, const Variable& input);

// True on this thread while checkpoint() recomputes a block in backward.
bool recomputing();

}  // namespace tandem
