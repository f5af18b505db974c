// map: sequential, or parallel with a background runner that keeps up to
// `parallelism` calls in flight on the data thread pool. With kAutotune the
// parallelism starts at 1 and grows while the consumer finds no result ready
// (it is then the bottleneck), up to the pool's size.
#include <algorithm>
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

// Runs fn with element_random_seed() = (pass, position) for the call; a map
// iterated inside fn (nested, same thread) leaves fn's seed as it found it.
Element call_with_seed(const MapFn& fn, Element e, int64_t pass, int64_t position) {
  struct Restore {
    bool in_call = in_map_call;
    uint64_t seed = map_call_seed;
    ~Restore() {
      in_map_call = in_call;
      map_call_seed = seed;
    }
  } restore;
  in_map_call = true;
  map_call_seed = mix_seed(static_cast<uint64_t>(pass), static_cast<uint64_t>(position));
  return fn(std::move(e));
}

class MapNode : public detail::UnaryNode, public std::enable_shared_from_this<MapNode> {
 public:
  MapNode(std::shared_ptr<detail::Node> input, MapFn fn, MapOptions options)
      : UnaryNode(std::move(input)), fn_(std::move(fn)), options_(options) {}

  std::unique_ptr<IteratorBase> make_iterator() override;
  std::shared_ptr<detail::Node> with_input(std::shared_ptr<detail::Node> input) const override {
    auto copy = std::make_shared<MapNode>(std::move(input), fn_, options_);
    copy->stride_ = stride_;
    copy->offset_ = offset_;
    return copy;
  }
  std::shared_ptr<detail::Node> with_sharded_input(std::shared_ptr<detail::Node> input,
                                                   int64_t shards, int64_t index) const override {
    auto copy = std::make_shared<MapNode>(std::move(input), fn_, options_);
    copy->stride_ = stride_ * shards;
    copy->offset_ = offset_ + stride_ * index;
    return copy;
  }
  int64_t cardinality() const override { return input_->cardinality(); }
  bool deterministic_order() const override {
    return options_.deterministic || options_.num_parallel_calls == 1;
  }
  // The position an input element's random seed takes (its position in the
  // unsharded stream: see with_sharded_input).
  int64_t seed_position(int64_t position) const { return offset_ + stride_ * position; }
  std::string label() const override {
    if (options_.num_parallel_calls == 1) return "map";
    const std::string p = options_.num_parallel_calls == kAutotune
                              ? "autotune"
                              : std::to_string(options_.num_parallel_calls);
    return "map(" + p + (options_.deterministic ? ")" : ", nondeterministic)");
  }

  const MapFn fn_;
  const MapOptions options_;
  int64_t stride_ = 1, offset_ = 0;
};

class SequentialMap : public IteratorBase {
 public:
  SequentialMap(MapNode* node, std::unique_ptr<IteratorBase> input)
      : node_(node), input_(std::move(input)), pass_(node->next_pass()) {}
  std::optional<Element> next() override {
    auto e = detail::timed_next(*input_, node_->counters);
    if (!e) return std::nullopt;
    const auto start = Clock::now();
    Element out =
        call_with_seed(node_->fn_, std::move(*e), pass_, node_->seed_position(position_++));
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

// Parallel map. A runner thread pulls input elements and hands them to the
// data pool in chunks: cheap functions (a few microseconds) get chunks of
// many elements so that the thread hand-offs, not the work, do not dominate;
// expensive ones get one element per task. At most `parallelism` chunks are
// in flight, and results (in input order) wait in a window of
// parallelism x chunk elements, which bounds memory.
class ParallelMap : public IteratorBase {
 public:
  ParallelMap(std::shared_ptr<MapNode> node, std::unique_ptr<IteratorBase> input)
      : node_(std::move(node)), input_(std::move(input)), shared_(std::make_shared<Shared>()) {
    MapNode* n = node_.get();
    pass_ = n->next_pass();
    const int max = detail::data_pool().size();
    const int requested = n->options_.num_parallel_calls;
    shared_->autotune = requested == kAutotune;
    shared_->parallelism = shared_->autotune ? 1 : requested;
    shared_->max_parallelism = shared_->autotune ? max : requested;
    node_->counters.capacity.store(shared_->parallelism);
    runner_ = std::thread([this, from_pool = detail::on_pool_thread()] {
      detail::inherit_pool_thread(from_pool);
      run();
    });
  }

  ~ParallelMap() override {
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      shared_->cancelled = true;
    }
    shared_->runner_cv.notify_all();
    runner_.join();
    // Wait for the chunks on the pool (each stops after its current call):
    // a call left running could outlive the program's static state (oneDNN's
    // among them) when the iterator is the last thing destroyed before exit.
    std::unique_lock<std::mutex> lock(shared_->mutex);
    shared_->runner_cv.wait(lock, [this] { return shared_->chunks_in_flight == 0; });
    shared_->results.clear();
  }

  std::optional<Element> next() override {
    if (finished_) return std::nullopt;
    Shared& s = *shared_;
    std::unique_lock<std::mutex> lock(s.mutex);
    const auto start = Clock::now();
    bool waited = false;
    for (;;) {
      auto ready = s.results.end();
      if (!s.results.empty()) {
        if (node_->options_.deterministic) {
          if (s.results.front()->done) ready = s.results.begin();
        } else {
          // Any finished call; the end of the input only once all calls before it are consumed.
          for (auto it = s.results.begin(); it != s.results.end(); ++it) {
            if ((*it)->done && (!(*it)->terminal || it == s.results.begin())) {
              ready = it;
              break;
            }
          }
        }
      }
      if (ready != s.results.end()) {
        std::shared_ptr<Slot> slot = *ready;
        s.results.erase(ready);
        node_->counters.buffer_sum.fetch_add(static_cast<int64_t>(s.results.size()),
                                             std::memory_order_relaxed);
        node_->counters.buffer_samples.fetch_add(1, std::memory_order_relaxed);
        adapt(waited);
        const bool wake_runner = s.runner_waiting;
        lock.unlock();
        if (wake_runner) s.runner_cv.notify_one();
        node_->counters.wait_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
        if (slot->terminal) finished_ = true;
        if (slot->error) std::rethrow_exception(slot->error);
        if (slot->terminal) return std::nullopt;
        node_->counters.elements.fetch_add(1, std::memory_order_relaxed);
        return std::move(slot->value);
      }
      waited = true;
      s.consumer_waiting = true;
      s.consumer_cv.wait(lock);
      s.consumer_waiting = false;
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
    std::condition_variable consumer_cv, runner_cv;
    bool consumer_waiting = false, runner_waiting = false;
    std::deque<std::shared_ptr<Slot>> results;  // in input order
    int chunks_in_flight = 0;
    int parallelism = 1;
    int max_parallelism = 1;
    int64_t chunk = 1;
    bool autotune = false;
    bool cancelled = false;
    // Autotune window.
    int64_t window_calls = 0;
    int64_t window_waits = 0;
  };

  // Chunks of about this much work amortise a hand-off (a few microseconds).
  static constexpr int64_t kChunkWorkNs = 200000;
  static constexpr int64_t kMaxChunk = 256;

  // Called with the lock held after each consumed element: grow the
  // parallelism while the consumer keeps waiting for results.
  void adapt(bool waited) {
    Shared& s = *shared_;
    if (!s.autotune) return;
    ++s.window_calls;
    s.window_waits += waited ? 1 : 0;
    if (s.window_calls < 16 * s.chunk) return;
    if (s.window_waits * 10 > s.window_calls && s.parallelism < s.max_parallelism) {
      ++s.parallelism;
      node_->counters.capacity.store(s.parallelism);
    }
    s.window_calls = s.window_waits = 0;
  }

  // Elements per chunk from the mean cost of a call so far.
  int64_t chunk_size() const {
    const int64_t calls = node_->counters.elements.load(std::memory_order_relaxed);
    if (calls < 8) return 1;
    const int64_t mean_ns =
        std::max<int64_t>(1, node_->counters.busy_ns.load(std::memory_order_relaxed) / calls);
    return std::clamp<int64_t>(kChunkWorkNs / mean_ns, 1, kMaxChunk);
  }

  void run() {
    MemoryCategoryScope input_memory(MemoryCategory::input);
    std::shared_ptr<Shared> s = shared_;
    for (;;) {
      int64_t chunk = 0;
      {
        std::unique_lock<std::mutex> lock(s->mutex);
        s->chunk = chunk_size();
        chunk = s->chunk;
        s->runner_waiting = true;
        s->runner_cv.wait(lock, [&] {
          return s->cancelled || (s->chunks_in_flight < s->parallelism &&
                                  static_cast<int64_t>(s->results.size()) < s->parallelism * chunk);
        });
        s->runner_waiting = false;
        if (s->cancelled) return;
      }
      // Pull a chunk from the input (this thread is the input's only user).
      std::vector<std::pair<std::shared_ptr<Slot>, Element>> work;
      std::shared_ptr<Slot> terminal;
      for (int64_t i = 0; i < chunk; ++i) {
        std::optional<Element> input;
        auto slot = std::make_shared<Slot>();
        try {
          input = detail::timed_next(*input_, node_->counters);
        } catch (...) {
          slot->error = std::current_exception();
        }
        if (slot->error || !input) {
          slot->terminal = true;
          slot->done = true;
          terminal = slot;
          break;
        }
        work.emplace_back(std::move(slot), std::move(*input));
      }
      {
        std::lock_guard<std::mutex> lock(s->mutex);
        for (auto& [slot, element] : work) s->results.push_back(slot);
        if (terminal) s->results.push_back(terminal);
        if (!work.empty()) ++s->chunks_in_flight;
      }
      if (!work.empty()) {
        const auto count = static_cast<int64_t>(work.size());
        detail::data_pool().submit([s, node = node_, pass = pass_, first = position_,
                                    work = std::move(work)]() mutable {
          int64_t position = first;
          for (auto& [slot, element] : work) {
            const auto start = Clock::now();
            try {
              slot->value = call_with_seed(node->fn_, std::move(element), pass,
                                           node->seed_position(position));
            } catch (...) {
              slot->error = std::current_exception();
            }
            ++position;
            node->counters.busy_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
            std::lock_guard<std::mutex> lock(s->mutex);
            slot->done = true;
            if (s->consumer_waiting) s->consumer_cv.notify_one();
            if (s->cancelled) break;  // the iterator's destructor waits for this task
          }
          // Nothing but `s` may outlive the iterator's destructor, which
          // returns once this count drops.
          work.clear();
          node.reset();
          std::lock_guard<std::mutex> lock(s->mutex);
          --s->chunks_in_flight;
          if (s->runner_waiting || s->cancelled) s->runner_cv.notify_all();
        });
        position_ += count;  // `work` was moved into the task
      }
      if (terminal) {
        std::lock_guard<std::mutex> lock(s->mutex);
        if (s->consumer_waiting) s->consumer_cv.notify_one();
        return;
      }
    }
  }

  std::shared_ptr<MapNode> node_;
  std::unique_ptr<IteratorBase> input_;
  std::shared_ptr<Shared> shared_;
  std::thread runner_;
  bool finished_ = false;
  int64_t pass_ = 0;
  int64_t position_ = 0;  // input position of the next element (runner thread only)
};

std::unique_ptr<IteratorBase> MapNode::make_iterator() {
  // Nested inside another map's call on the pool: run sequentially (the same
  // elements in the same order, element seeds included) instead of waiting
  // for pool workers that may all be busy waiting likewise.
  if (options_.num_parallel_calls == 1 || detail::on_pool_thread())
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
