// map: sequential, or parallel with a background runner that keeps up to
// `parallelism` calls in flight on the data thread pool. With kAutotune the
// parallelism starts at 1 and grows while the consumer finds no result ready
// (it is then the bottleneck), up to the pool's size.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/data/dataset.h"
#include "tandem/data/detail/node.h"
#include "tandem/data/detail/thread_pool.h"

namespace tandem::data {
namespace {

using detail::Clock;

thread_local bool in_map_call = false;
thread_local uint64_t map_call_seed = 0;

// Runs fn with element_random_seed() = (pass, position) for the call.
Element call_with_seed(const MapFn& fn, Element e, int64_t pass, int64_t position) {
  in_map_call = true;
  map_call_seed = mix_seed(static_cast<uint64_t>(pass), static_cast<uint64_t>(position));
  struct Reset {
    ~Reset() { in_map_call = false; }
  } reset;
  return fn(std::move(e));
}

class MapNode : public detail::UnaryNode, public std::enable_shared_from_this<MapNode> {
 public:
  MapNode(std::shared_ptr<detail::Node> input, MapFn fn, MapOptions options)
      : UnaryNode(std::move(input)), fn_(std::move(fn)), options_(options) {}

  std::unique_ptr<IteratorBase> make_iterator() override;
  std::shared_ptr<detail::Node> with_input(std::shared_ptr<detail::Node> input) const override {
    return std::make_shared<MapNode>(std::move(input), fn_, options_);
  }
  std::string label() const override {
    if (options_.num_parallel_calls == 1) return "map";
    const std::string p = options_.num_parallel_calls == kAutotune
                              ? "autotune"
                              : std::to_string(options_.num_parallel_calls);
    return "map(" + p + (options_.deterministic ? ")" : ", nondeterministic)");
  }

  const MapFn fn_;
  const MapOptions options_;
};

class SequentialMap : public IteratorBase {
 public:
  SequentialMap(MapNode* node, std::unique_ptr<IteratorBase> input)
      : node_(node), input_(std::move(input)), pass_(node->next_pass()) {}
  std::optional<Element> next() override {
    auto e = detail::timed_next(*input_, node_->counters);
    if (!e) return std::nullopt;
    const auto start = Clock::now();
    Element out = call_with_seed(node_->fn_, std::move(*e), pass_, position_++);
    node_->counters.busy_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
    node_->counters.elements.fetch_add(1, std::memory_order_relaxed);
    return out;
  }

 private:
  MapNode* node_;
  std::unique_ptr<IteratorBase> input_;
  int64_t pass_;
  int64_t position_ = 0;
};

class ParallelMap : public IteratorBase {
 public:
  ParallelMap(std::shared_ptr<MapNode> node, std::unique_ptr<IteratorBase> input)
      : node_(std::move(node)), input_(std::move(input)), shared_(std::make_shared<Shared>()) {
    MapNode* n = node_.get();
    pass_ = n->next_pass();
    const int max = detail::data_pool().size();
    const int requested = n->options_.num_parallel_calls;
    shared_->autotune = requested == kAutotune;
    shared_->parallelism = shared_->autotune ? 1 : std::min(requested, std::max(max, requested));
    shared_->max_parallelism = shared_->autotune ? max : shared_->parallelism;
    node_->counters.capacity.store(shared_->parallelism);
    runner_ = std::thread([this] { run(); });
  }

  ~ParallelMap() override {
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      shared_->cancelled = true;
    }
    shared_->cv.notify_all();
    runner_.join();
    // Calls still running on the pool hold `shared_` and finish on their own.
  }

  std::optional<Element> next() override {
    if (finished_) return std::nullopt;
    std::unique_lock<std::mutex> lock(shared_->mutex);
    const auto start = Clock::now();
    bool waited = false;
    for (;;) {
      auto ready = shared_->results.end();
      if (!shared_->results.empty()) {
        if (node_->options_.deterministic) {
          if (shared_->results.front()->done) ready = shared_->results.begin();
        } else {
          // Any finished call; the end of the input only once all calls before it are consumed.
          for (auto it = shared_->results.begin(); it != shared_->results.end(); ++it) {
            if ((*it)->done && (!(*it)->terminal || it == shared_->results.begin())) {
              ready = it;
              break;
            }
          }
        }
      }
      if (ready != shared_->results.end()) {
        std::shared_ptr<Slot> slot = *ready;
        shared_->results.erase(ready);
        node_->counters.buffer_sum.fetch_add(static_cast<int64_t>(shared_->results.size()),
                                             std::memory_order_relaxed);
        node_->counters.buffer_samples.fetch_add(1, std::memory_order_relaxed);
        adapt(waited);
        lock.unlock();
        shared_->cv.notify_all();
        node_->counters.wait_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
        if (slot->terminal) finished_ = true;
        if (slot->error) std::rethrow_exception(slot->error);
        if (slot->terminal) return std::nullopt;
        node_->counters.elements.fetch_add(1, std::memory_order_relaxed);
        return std::move(slot->value);
      }
      waited = true;
      shared_->cv.wait(lock);
    }
  }

 private:
  struct Slot {
    bool done = false;
    bool terminal = false;  // input exhausted or failed: the last slot
    std::optional<Element> value;
    std::exception_ptr error;
  };
  struct Shared {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<std::shared_ptr<Slot>> results;  // in input order
    int in_flight = 0;
    int parallelism = 1;
    int max_parallelism = 1;
    bool autotune = false;
    bool cancelled = false;
    // Autotune window.
    int64_t window_calls = 0;
    int64_t window_waits = 0;
  };

  // Called with the lock held after each consumed element: grow the
  // parallelism while the consumer keeps waiting for results.
  void adapt(bool waited) {
    Shared& s = *shared_;
    if (!s.autotune) return;
    ++s.window_calls;
    s.window_waits += waited ? 1 : 0;
    if (s.window_calls < 16) return;
    if (s.window_waits * 10 > s.window_calls && s.parallelism < s.max_parallelism) {
      ++s.parallelism;
      node_->counters.capacity.store(s.parallelism);
    }
    s.window_calls = s.window_waits = 0;
  }

  void run() {
    std::shared_ptr<Shared> s = shared_;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(s->mutex);
        // Results not yet consumed count against the window, so memory stays
        // bounded by the parallelism even when the consumer is slow.
        s->cv.wait(lock, [&] {
          return s->cancelled || static_cast<int>(s->results.size()) < s->parallelism;
        });
        if (s->cancelled) return;
      }
      auto slot = std::make_shared<Slot>();
      std::optional<Element> input;
      try {
        input = detail::timed_next(*input_, node_->counters);
      } catch (...) {
        slot->error = std::current_exception();
      }
      const bool stop = slot->error || !input;
      {
        std::lock_guard<std::mutex> lock(s->mutex);
        s->results.push_back(slot);
        if (stop) {
          slot->terminal = true;
          slot->done = true;
        } else {
          ++s->in_flight;
        }
      }
      if (stop) {
        s->cv.notify_all();
        return;
      }
      detail::data_pool().submit([s, slot, node = node_, pass = pass_, position = position_++,
                                  element = std::move(*input)]() mutable {
        const auto start = Clock::now();
        try {
          slot->value = call_with_seed(node->fn_, std::move(element), pass, position);
        } catch (...) {
          slot->error = std::current_exception();
        }
        node->counters.busy_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
        {
          std::lock_guard<std::mutex> lock(s->mutex);
          slot->done = true;
          --s->in_flight;
        }
        s->cv.notify_all();
      });
    }
  }

  std::shared_ptr<MapNode> node_;  // pool tasks hold it too: the node may outlive nothing else
  std::unique_ptr<IteratorBase> input_;
  std::shared_ptr<Shared> shared_;
  std::thread runner_;
  bool finished_ = false;
  int64_t pass_ = 0;
  int64_t position_ = 0;  // next input position (runner thread only)
};

std::unique_ptr<IteratorBase> MapNode::make_iterator() {
  if (options_.num_parallel_calls == 1)
    return std::make_unique<SequentialMap>(this, input_->make_iterator());
  return std::make_unique<ParallelMap>(shared_from_this(), input_->make_iterator());
}

}  // namespace

uint64_t element_random_seed() {
  if (!in_map_call) TANDEM_THROW(Error, "element_random_seed() called outside a map function");
  return map_call_seed;
}

Dataset Dataset::map(MapFn fn, MapOptions options) const {
  if (!fn) TANDEM_THROW(InvalidArgument, "map needs a function");
  if (options.num_parallel_calls < 1 && options.num_parallel_calls != kAutotune) {
    TANDEM_THROW(InvalidArgument, "map: num_parallel_calls must be at least 1 or kAutotune, got ",
                 options.num_parallel_calls);
  }
  return Dataset(std::make_shared<MapNode>(node_, std::move(fn), options));
}

}  // namespace tandem::data
