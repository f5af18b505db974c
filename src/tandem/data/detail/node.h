#pragma once
// Private: the pipeline node interface behind Dataset, and helpers shared by
// the node implementations.

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tandem/data/dataset.h"

namespace tandem::data::detail {

// Counters of one stage, updated by its iterators (any thread).
struct Counters {
  std::atomic<int64_t> elements{0};
  std::atomic<int64_t> busy_ns{0};
  std::atomic<int64_t> wait_ns{0};
  std::atomic<int64_t> buffer_sum{0};  // sum of sampled occupancies
  std::atomic<int64_t> buffer_samples{0};
  std::atomic<int64_t> capacity{0};  // current buffer size / parallelism
};

// The source positions of one pass's elements, in order (see
// Node::make_position_iterator).
class PositionIterator {
 public:
  virtual ~PositionIterator() = default;
  virtual std::optional<int64_t> next() = 0;
};

class Node {
 public:
  virtual ~Node() = default;
  // A fresh iterator for one pass.
  virtual std::unique_ptr<IteratorBase> make_iterator() = 0;
  // "map(autotune)", "batch(128, drop_remainder)"
  virtual std::string label() const = 0;
  // The upstream node (null for a source).
  virtual std::shared_ptr<Node> input() const { return nullptr; }
  // The same transformation over another input (for pipeline rewrites such as
  // auto-sharding). Sources throw.
  virtual std::shared_ptr<Node> with_input(std::shared_ptr<Node> input) const;
  // File sources: the files read, in order; others: empty.
  virtual std::vector<std::string> files() const { return {}; }
  // File sources: the same source over other files.
  virtual std::shared_ptr<Node> with_files(std::vector<std::string> files) const;

  // Random-access sources, and stages that only select and reorder elements
  // over them (shuffle, shard, take, skip): the source positions of the
  // elements one pass yields, so that a batch can gather its rows at once.
  // Null where not available. Starts a pass, like make_iterator().
  virtual std::unique_ptr<PositionIterator> make_position_iterator() { return nullptr; }
  // Whether this is a source with random access (gather() works).
  virtual bool random_access() const { return false; }
  // Random-access sources: the elements at these positions stacked along a
  // new first dimension, the same bytes batch() builds from them.
  virtual Element gather(std::span<const int64_t> positions);

  // True for a stage that passes on every element of its input and only
  // changes their order (shuffle): DATA auto-sharding goes above the last.
  virtual bool reorders_only() const { return false; }
  // True for a source whose elements are file names (from_files), and for
  // a stage that turns each element into many (interleave): DATA
  // auto-sharding over such a source goes above the stage that reads the
  // files, so that it splits their records, not the list of files.
  virtual bool yields_file_names() const { return false; }
  virtual bool expands_elements() const { return false; }
  // True for a stage whose result depends on where each element falls in
  // the whole stream (take, skip) or that keeps the stream it saw in a file
  // (cache(path)): auto-sharding splits the stream above the last such
  // stage, so that it applies to the dataset as one process's.
  virtual bool counts_positions() const { return false; }
  // False for a stage that yields its elements in completion order (a map
  // with deterministic = false): two workers' passes differ.
  virtual bool deterministic_order() const { return true; }
  // The passes of its input one pass of this stage starts (repeat(n): n;
  // endless: a stride no run reaches): Dataset::iterator(pass) numbers the
  // input's passes from pass times this, so that consecutive passes never
  // share an input pass (and its shuffle order).
  virtual int64_t input_passes_per_pass() const { return 1; }
  // A copy over `input` for a stream that is shard `index` of `shards` of
  // the one this stage had (element j here is element j * shards + index
  // there): a map numbers its elements' random seeds as there.
  virtual std::shared_ptr<Node> with_sharded_input(std::shared_ptr<Node> input, int64_t shards,
                                                   int64_t index) const {
    (void)shards;
    (void)index;
    return with_input(std::move(input));
  }

  // Elements one pass yields, kInfiniteCardinality or kUnknownCardinality.
  virtual int64_t cardinality() const { return kUnknownCardinality; }

  // 0, 1, 2, ...: numbers the passes that reach this node.
  int64_t next_pass() { return passes_.fetch_add(1); }
  // The number the next pass gets (Dataset::iterator(pass)).
  void set_next_pass(int64_t pass) { passes_.store(pass); }

  Counters counters;

 private:
  std::atomic<int64_t> passes_{0};
};

using Clock = std::chrono::steady_clock;

inline int64_t elapsed_ns(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since).count();
}

// Times a call to the input iterator as this stage's wait.
inline std::optional<Element> timed_next(IteratorBase& input, Counters& counters) {
  const auto start = Clock::now();
  std::optional<Element> e = input.next();
  counters.wait_ns.fetch_add(elapsed_ns(start), std::memory_order_relaxed);
  return e;
}

// Helper for nodes with one input.
class UnaryNode : public Node {
 public:
  explicit UnaryNode(std::shared_ptr<Node> input) : input_(std::move(input)) {}
  std::shared_ptr<Node> input() const override { return input_; }

 protected:
  std::shared_ptr<Node> input_;
};

// Number of threads the data layer may use for parallel work.
int data_threads();

}  // namespace tandem::data::detail
