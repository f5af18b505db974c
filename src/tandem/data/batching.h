#pragma once
// Helpers to cut mini-batches out of in-memory datasets: a per-epoch shuffled
// order that depends only on (seed, epoch), and gathering rows by index.

#include <cstdint>
#include <span>
#include <vector>

#include "tandem/tensor/tensor.h"

namespace tandem::data {

// A permutation of [0, n) drawn from (seed, epoch) with Fisher-Yates: the same
// arguments always give the same order, so a resumed run replays it.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

// Rows of source (dimension 0) in the given order, as a new tensor.
Tensor gather_rows(const Tensor& source, std::span<const int64_t> rows);

}  // namespace tandem::data
