#include "tandem/data/dataset.h"

#include <thread>

#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/data/detail/node.h"

namespace tandem::data {

namespace detail {

std::shared_ptr<Node> Node::with_input(std::shared_ptr<Node>) const {
  TANDEM_THROW(Error, "pipeline stage '", label(), "' has no input to replace");
}

Element Node::gather(std::span<const int64_t>) {
  TANDEM_THROW(Error, "pipeline stage '", label(), "' has no random access");
}

std::shared_ptr<Node> Node::with_files(std::vector<std::string>) const {
  TANDEM_THROW(Error, "pipeline stage '", label(), "' does not read files");
}

int data_threads() {
  static const int threads = std::max(2, cpu_info().logical_cpus);
  return threads;
}

}  // namespace detail

Iterator::Iterator() = default;
Iterator::Iterator(std::unique_ptr<IteratorBase> impl, std::shared_ptr<detail::Node> pipeline)
    : pipeline_(std::move(pipeline)), impl_(std::move(impl)) {}
Iterator::~Iterator() = default;
Iterator::Iterator(Iterator&&) noexcept = default;
// By hand: the default assigns pipeline_ first, which may free the nodes a
// running pass (a prefetch's producer thread, a parallel map's calls) still
// reads before impl_'s destructor stops it.
Iterator& Iterator::operator=(Iterator&& other) noexcept {
  if (this != &other) {
    impl_.reset();
    pipeline_ = std::move(other.pipeline_);
    impl_ = std::move(other.impl_);
    ended_by_error_ = other.ended_by_error_;
  }
  return *this;
}

std::optional<Element> Iterator::next() {
  MemoryCategoryScope input_memory(MemoryCategory::input);
  if (ended_by_error_) return std::nullopt;
  if (!impl_) TANDEM_THROW(Error, "next() on an empty Iterator");
  try {
    return impl_->next();
  } catch (...) {
    // The pass ends at its first error, whatever the pipeline's shape (a
    // prefetch buffer ended it, a bare map went on with the next element):
    // the threads stop now, and later calls see the end.
    ended_by_error_ = true;
    impl_.reset();
    throw;
  }
}

Dataset::Dataset(std::shared_ptr<detail::Node> node) : node_(std::move(node)) {
  if (!node_) TANDEM_THROW(InvalidArgument, "Dataset needs a pipeline node");
}

Iterator Dataset::iterator() const {
  return Iterator(node_->make_iterator(), node_);
}

Iterator Dataset::iterator(int64_t pass) const {
  if (pass < 0) TANDEM_THROW(InvalidArgument, "a pass number must be >= 0, got ", pass);
  // Below a repeat(n), pass k's input passes are k*n .. k*n + n-1.
  int64_t number = pass;
  for (auto n = node_; n; n = n->input()) {
    n->set_next_pass(number);
    if (__builtin_mul_overflow(number, n->input_passes_per_pass(), &number)) {
      TANDEM_THROW(InvalidArgument, "pass ", pass,
                   " is past what the pipeline's repeats can number");
    }
  }
  return iterator();
}

int64_t Dataset::cardinality() const {
  return node_->cardinality();
}

std::string Dataset::describe() const {
  std::vector<std::string> labels;
  for (auto n = node_; n; n = n->input()) labels.push_back(n->label());
  std::string out;
  for (auto it = labels.rbegin(); it != labels.rend(); ++it)
    out += (out.empty() ? "" : " -> ") + *it;
  return out;
}

std::vector<StageStats> Dataset::stats() const {
  std::vector<StageStats> out;
  for (auto n = node_; n; n = n->input()) {
    const detail::Counters& c = n->counters;
    StageStats s;
    s.stage = n->label();
    s.elements = c.elements.load();
    s.busy_seconds = static_cast<double>(c.busy_ns.load()) * 1e-9;
    s.wait_seconds = static_cast<double>(c.wait_ns.load()) * 1e-9;
    const int64_t samples = c.buffer_samples.load();
    s.mean_buffer =
        samples > 0 ? static_cast<double>(c.buffer_sum.load()) / static_cast<double>(samples) : 0.0;
    s.buffer_capacity = c.capacity.load();
    out.push_back(s);
  }
  return {out.rbegin(), out.rend()};
}

}  // namespace tandem::data
