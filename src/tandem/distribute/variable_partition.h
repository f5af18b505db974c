#pragma once
// Where a parameter server keeps each variable (TensorFlow's
// ParameterServerStrategy with a MinSizePartitioner): a variable of at least
// twice min_shard_bytes is split along its first axis into as many pieces of
// at least min_shard_bytes as it has rows and there are shards; the others
// stay whole. Largest first, each variable's pieces go to the least-loaded
// shards (distinct shards for the pieces of one variable; ties to the lower
// index), so the shards hold about the same bytes. Deterministic: every
// process computes the same placement.

#include <cstdint>
#include <vector>

#include "tandem/tensor/shape.h"

namespace tandem::distribute {

struct VariablePiece {
  size_t variable = 0;  // index into the shapes given
  int64_t begin = 0;    // rows [begin, end) of the first axis (0, 1 for a scalar)
  int64_t end = 0;
  int shard = 0;
  int64_t bytes = 0;  // f32 bytes of the piece
};

// The pieces of every variable, ordered by variable then rows. Throws
// InvalidArgument for shards < 1 or min_shard_bytes < 1. split: false keeps
// every variable whole (for optimizers whose step depends on the whole
// variable's norms: LARS, LAMB).
std::vector<VariablePiece> partition_variables(const std::vector<Shape>& shapes, int shards,
                                               int64_t min_shard_bytes, bool split = true);

}  // namespace tandem::distribute
