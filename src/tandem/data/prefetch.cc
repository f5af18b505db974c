// prefetch: a background thread keeps a bounded queue of ready elements. With
// kAutotune the bound starts at 1 and doubles whenever the consumer finds the
// queue empty, up to 64 elements and a memory budget of 512 MiB.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "tandem/base/error.h"
#include "tandem/data/dataset.h"
#include "tandem/data/detail/node.h"
#include "tandem/data/detail/thread_pool.h"

namespace tandem::data {
namespace {

using detail::Clock;

constexpr int64_t kMaxAutotuneBuffer = 64;
constexpr int64_t kMemoryBudgetBytes = int64_t{512} << 20;

int64_t element_bytes(const Element& e) {
  int64_t bytes = 0;
  for (const auto& [name, t] : e.features()) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

class PrefetchNode : public detail::UnaryNode {
 public:
  PrefetchNode(std::shared_ptr<detail::Node> input, int64_t buffer)
      : UnaryNode(std::move(input)), buffer_(buffer) {}
  std::unique_ptr<IteratorBase> make_iterator() override;
  std::shared_ptr<detail::Node> with_input(std::shared_ptr<detail::Node> input) const override {
    return std::make_shared<PrefetchNode>(std::move(input), buffer_);
  }
  int64_t cardinality() const override { return input_->cardinality(); }
  std::string label() const override {
    return "prefetch(" +
           (buffer_ == kAutotune ? std::string("autotune") : std::to_string(buffer_)) + ")";
  }
  const int64_t buffer_;
};

class PrefetchIterator : public IteratorBase {
 public:
  PrefetchIterator(PrefetchNode* node, std::unique_ptr<IteratorBase> input)
      : node_(node),
        input_(std::move(input)),
        autotune_(node->buffer_ == kAutotune),
        capacity_(autotune_ ? 1 : node->buffer_) {
    node_->counters.capacity.store(capacity_);
    producer_ = std::thread([this, from_pool = detail::on_pool_thread()] {
      detail::inherit_pool_thread(from_pool);
      produce();
    });
  }

  ~PrefetchIterator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cancelled_ = true;
    }
    cv_.notify_all();
    producer_.join();
  }

  std::optional<Element> next() override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (queue_.empty() && !done_) {
      // The consumer caught up with the producer: a deeper buffer would have
      // absorbed the difference, within the memory budget.
      if (autotune_ && capacity_ < kMaxAutotuneBuffer &&
          (capacity_ * 2) * std::max<int64_t>(last_bytes_, 1) <= kMemoryBudgetBytes) {
        capacity_ *= 2;
        node_->counters.capacity.store(capacity_);
        cv_.notify_all();
      }
      const auto start = Clock::now();
      cv_.wait(lock, [this] { return !queue_.empty() || done_; });
      node_->counters.wait_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
    }
    node_->counters.buffer_sum.fetch_add(static_cast<int64_t>(queue_.size()),
                                         std::memory_order_relaxed);
    node_->counters.buffer_samples.fetch_add(1, std::memory_order_relaxed);
    if (queue_.empty()) {
      if (error_) {
        std::exception_ptr e = error_;
        error_ = nullptr;
        std::rethrow_exception(e);
      }
      return std::nullopt;
    }
    Element e = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    cv_.notify_all();
    node_->counters.elements.fetch_add(1, std::memory_order_relaxed);
    return e;
  }

 private:
  void produce() {
    MemoryCategoryScope input_memory(MemoryCategory::input);
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock,
                 [this] { return cancelled_ || static_cast<int64_t>(queue_.size()) < capacity_; });
        if (cancelled_) return;
      }
      std::optional<Element> e;
      std::exception_ptr error;
      const auto start = Clock::now();
      try {
        e = input_->next();
      } catch (...) {
        error = std::current_exception();
      }
      node_->counters.busy_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
      std::lock_guard<std::mutex> lock(mutex_);
      if (!e) {
        error_ = error;
        done_ = true;
        cv_.notify_all();
        return;
      }
      last_bytes_ = element_bytes(*e);
      queue_.push_back(std::move(*e));
      cv_.notify_all();
    }
  }

  PrefetchNode* node_;
  std::unique_ptr<IteratorBase> input_;
  const bool autotune_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Element> queue_;
  int64_t capacity_;
  int64_t last_bytes_ = 0;
  bool done_ = false;
  bool cancelled_ = false;
  std::exception_ptr error_;
  std::thread producer_;
};

std::unique_ptr<IteratorBase> PrefetchNode::make_iterator() {
  return std::make_unique<PrefetchIterator>(this, input_->make_iterator());
}

}  // namespace

Dataset Dataset::prefetch(int64_t buffer_size) const {
  if (buffer_size < 1 && buffer_size != kAutotune) {
    TANDEM_THROW(InvalidArgument, "prefetch buffer must be at least 1 or kAutotune, got ",
                 buffer_size);
  }
  return Dataset(std::make_shared<PrefetchNode>(node_, buffer_size));
}

}  // namespace tandem::data
