#pragma once
// Inverted dropout: each element is kept with probability 1 - p and scaled by
// 1 / (1 - p). The mask comes from the counter-based generator, so it depends
// only on (seed, offset), never on the thread count.

#include <cstdint>

#include "tandem/tensor/tensor.h"

namespace tandem::kernels {

struct DropoutResult {
  Tensor y;
  Tensor mask;  // u8, x's shape: 1 kept, 0 dropped
};

// p in [0, 1); throws InvalidArgument otherwise. Element i is kept when
// random_bits_at(seed, offset + i) / 2^32 >= p.
DropoutResult dropout(const Tensor& x, float p, uint64_t seed, uint64_t offset);

// dx = dy * mask / (1 - p).
Tensor dropout_backward(const Tensor& dy, const Tensor& mask, float p);

}  // namespace tandem::kernels
