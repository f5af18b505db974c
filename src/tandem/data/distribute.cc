#include "tandem/data/distribute.h"

#include <algorithm>

#include "tandem/base/error.h"
#include "tandem/base/name_table.h"
#include "tandem/data/detail/node.h"

namespace tandem::data {

namespace {

constexpr NameTable<AutoShardPolicy, 4> kAutoShardPolicies{"auto-shard policy",
                                                           {{{AutoShardPolicy::automatic, "auto"},
                                                             {AutoShardPolicy::file, "file"},
                                                             {AutoShardPolicy::data, "data"},
                                                             {AutoShardPolicy::off, "off"}}}};

}  // namespace

std::string_view auto_shard_policy_name(AutoShardPolicy policy) {
  return kAutoShardPolicies.name(policy);
}

AutoShardPolicy parse_auto_shard_policy(std::string_view name) {
  return kAutoShardPolicies.parse(name);
}

Dataset auto_shard(const Dataset& dataset, int64_t num_shards, int64_t index,
                   AutoShardPolicy policy) {
  if (num_shards < 1 || index < 0 || index >= num_shards) {
    TANDEM_THROW(InvalidArgument, "auto_shard: need 0 <= index < num_shards, got ", index, " of ",
                 num_shards);
  }
  if (policy == AutoShardPolicy::off || num_shards == 1) return dataset;
  // The chain from the root down to the source.
  std::vector<std::shared_ptr<detail::Node>> chain;
  for (auto n = dataset.node(); n; n = n->input()) chain.push_back(n);
  const std::shared_ptr<detail::Node>& source = chain.back();
  const std::vector<std::string> files = source->files();
  std::shared_ptr<detail::Node> replacement;
  const bool enough_files = static_cast<int64_t>(files.size()) >= num_shards;
  if (policy == AutoShardPolicy::file && !enough_files) {
    TANDEM_THROW(InvalidArgument, "FILE auto-sharding over ", num_shards,
                 " workers needs at least ", num_shards, " files, the pipeline reads ",
                 files.size(), " (", source->label(), "); use DATA or AUTO");
  }
  // The topmost take, skip or file cache: the split goes above it (each
  // worker taking its own N, or every worker replaying one cache file, was
  // not the dataset one process reads). A split of the files would go
  // below it: AUTO splits the data then, FILE is refused.
  const auto counting = std::find_if(chain.begin(), chain.end() - 1,
                                     [](const auto& n) { return n->counts_positions(); });
  const bool counts = counting != chain.end() - 1;
  if (policy == AutoShardPolicy::file && counts) {
    TANDEM_THROW(InvalidArgument, "FILE auto-sharding cannot split the files under ",
                 (*counting)->label(),
                 " (each worker would apply it to its own files); use DATA or AUTO");
  }
  // The shard (or the file subset) goes right above chain[kept].
  size_t kept = chain.size() - 1;
  if (policy != AutoShardPolicy::data && enough_files && !counts) {
    std::vector<std::string> mine;
    for (size_t i = static_cast<size_t>(index); i < files.size();
         i += static_cast<size_t>(num_shards)) {
      mine.push_back(files[i]);
    }
    replacement = source->with_files(std::move(mine));
  } else {
    // Above the last shuffle: every worker draws the order one process
    // would (the same seed, every element) and keeps its every n-th, so
    // that together the workers' batches are one process's. The stages up
    // to that shuffle run on every element in every worker.
    for (size_t i = 0; i + 1 < chain.size(); ++i) {
      if (chain[i]->reorders_only()) {
        kept = i;
        break;
      }
    }
    if (counts) kept = std::min(kept, static_cast<size_t>(counting - chain.begin()));
    // Over a list of files, above the stage that reads them (a shard of
    // the list gave some workers no files at all).
    if (source->yields_file_names()) {
      for (size_t i = 0; i + 1 < chain.size(); ++i) {
        if (chain[i]->expands_elements()) {
          kept = std::min(kept, i);
          break;
        }
      }
    }
    // Each worker keeps its every n-th of the order it draws itself: the
    // stages under the split must draw the same order in every worker.
    for (size_t i = kept + 1; i + 1 < chain.size(); ++i) {
      if (!chain[i]->deterministic_order()) {
        TANDEM_THROW(InvalidArgument, "DATA auto-sharding splits the stream above ",
                     chain[i]->label(),
                     ", whose order differs from worker to worker (workers would train some "
                     "elements twice and others never): make it deterministic or move it above ",
                     chain[kept]->label());
      }
    }
    // Fresh copies of the stages under the shard: a shuffle numbers its
    // passes, and one shared with the unsharded pipeline (or another
    // shard's) would draw another pass's order.
    replacement = source;
    for (size_t i = chain.size() - 1; i-- > kept;) replacement = chain[i]->with_input(replacement);
    replacement = Dataset(replacement).shard(num_shards, index).node();
    // Above the split each stage sees every n-th element: a random map
    // numbers it as one process's pipeline would (the workers drew the same
    // flips and crops for their j-th elements).
    for (size_t i = kept; i-- > 0;)
      replacement = chain[i]->with_sharded_input(replacement, num_shards, index);
    return Dataset(replacement);
  }
  for (size_t i = kept; i-- > 0;) replacement = chain[i]->with_input(replacement);
  return Dataset(replacement);
}

std::vector<Element> split_batch(const Element& batch, int parts) {
  if (parts < 1)
    TANDEM_THROW(InvalidArgument, "split_batch: parts must be at least 1, got ", parts);
  if (batch.size() == 0) TANDEM_THROW(InvalidArgument, "split_batch: the batch has no features");
  const Tensor& first = batch.features()[0].second;
  if (first.rank() == 0)
    TANDEM_THROW(ShapeError, "split_batch: features must have a batch dimension");
  const int64_t rows = first.dim(0);
  for (const auto& [name, t] : batch.features()) {
    if (t.rank() == 0 || t.dim(0) != rows) {
      TANDEM_THROW(ShapeError, "split_batch: feature '", name, "' has ", t.to_string(),
                   ", expected ", rows, " rows");
    }
  }
  std::vector<Element> out(static_cast<size_t>(parts));
  int64_t begin = 0;
  for (int p = 0; p < parts; ++p) {
    const int64_t size = rows / parts + (p < rows % parts ? 1 : 0);
    for (const auto& [name, t] : batch.features()) out[p].set(name, t.slice(begin, begin + size));
    begin += size;
  }
  return out;
}

}  // namespace tandem::data
