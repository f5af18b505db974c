#pragma once
// Hooks for distribution strategies: splitting a pipeline between workers
// (tf.data's auto-sharding) and a global batch between replicas.

#include <cstdint>
#include <string_view>
#include <vector>

#include "tandem/data/dataset.h"

namespace tandem::data {

// FILE: each worker reads a disjoint subset of the files (needs at least as
// many files as workers). DATA: each worker reads everything and keeps every
// n-th element right after the source (over a list of files, after the
// interleave that reads them), or, where the pipeline shuffles,
// right after its last shuffle: each worker then keeps its share of the
// order one process would draw (the stages up to that shuffle run on every
// element in every worker), and the workers' batches together are one
// process's (the strategies' equivalence holds; under FILE it does not).
// Above a take, skip or file cache as well, which then see the whole stream
// as one process's pipeline does. Random maps above the split seed each
// element by its position in the unsplit stream (the workers drew the same
// numbers for their j-th elements). AUTO: FILE when the pipeline reads at
// least num_shards files and has no take, skip or file cache, DATA
// otherwise; FILE with one is refused. OFF: unchanged.
enum class AutoShardPolicy : uint8_t { automatic, file, data, off };

std::string_view auto_shard_policy_name(AutoShardPolicy policy);
AutoShardPolicy parse_auto_shard_policy(std::string_view name);

// The pipeline of worker `index` of `num_shards`: the shards are disjoint and
// together cover the dataset. Throws InvalidArgument for FILE with too few
// files, naming both counts.
Dataset auto_shard(const Dataset& dataset, int64_t num_shards, int64_t index,
                   AutoShardPolicy policy = AutoShardPolicy::automatic);

// Splits a batch (every feature's dimension 0) into `parts` consecutive
// pieces as even as possible: sizes differ by at most one, larger ones first.
// A piece may be empty when the batch has fewer rows than parts. Views share
// the batch's memory.
std::vector<Element> split_batch(const Element& batch, int parts);

}  // namespace tandem::data
