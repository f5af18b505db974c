// Sequential transformations: filter, batch, shuffle, repeat, take, skip, shard.
#include <cstring>

#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/data/dataset.h"
#include "tandem/data/detail/node.h"

namespace tandem::data {
namespace {

using detail::Clock;
using detail::Node;
using detail::UnaryNode;

// A node whose iterator is a function of the input iterator and the pass.
class SimpleNode : public UnaryNode {
 public:
  using Step =
      std::function<std::optional<Element>(IteratorBase& input, detail::Counters& counters)>;
  using Factory = std::function<Step(int64_t pass)>;
  // The output's cardinality from the input's (known, >= 0); null: unknown.
  using Cardinality = std::function<int64_t(int64_t input)>;

  SimpleNode(std::shared_ptr<Node> input, std::string label, Factory factory,
             Cardinality cardinality)
      : UnaryNode(std::move(input)),
        label_(std::move(label)),
        factory_(std::move(factory)),
        cardinality_(std::move(cardinality)) {}

  std::unique_ptr<IteratorBase> make_iterator() override {
    struct It : IteratorBase {
      SimpleNode* node;
      std::unique_ptr<IteratorBase> input;
      Step step;
      std::optional<Element> next() override {
        const auto start = Clock::now();
        const int64_t waited_before = node->counters.wait_ns.load(std::memory_order_relaxed);
        std::optional<Element> e = step(*input, node->counters);
        const int64_t waited =
            node->counters.wait_ns.load(std::memory_order_relaxed) - waited_before;
        node->counters.busy_ns.fetch_add(std::max<int64_t>(0, detail::elapsed_ns(start) - waited),
                                         std::memory_order_relaxed);
        if (e) node->counters.elements.fetch_add(1, std::memory_order_relaxed);
        return e;
      }
    };
    auto it = std::make_unique<It>();
    it->node = this;
    it->input = input_->make_iterator();
    it->step = factory_(next_pass());
    return it;
  }
  std::string label() const override { return label_; }
  std::shared_ptr<Node> with_input(std::shared_ptr<Node> input) const override {
    return std::make_shared<SimpleNode>(std::move(input), label_, factory_, cardinality_);
  }
  int64_t cardinality() const override {
    const int64_t n = input_->cardinality();
    if (!cardinality_ || n == kUnknownCardinality) return kUnknownCardinality;
    if (n == kInfiniteCardinality) return kInfiniteCardinality;
    return cardinality_(n);
  }

 private:
  std::string label_;
  Factory factory_;
  Cardinality cardinality_;
};

// For transformations that keep every element.
int64_t same_count(int64_t n) {
  return n;
}

Tensor stack(const std::vector<Element>& elements, size_t feature) {
  const auto& [name, first] = elements[0].features()[feature];
  std::vector<int64_t> dims = first.shape().to_vector();
  dims.insert(dims.begin(), static_cast<int64_t>(elements.size()));
  Tensor out = Tensor::empty(Shape(dims), first.dtype());
  const size_t bytes = first.nbytes();
  for (size_t i = 0; i < elements.size(); ++i) {
    const auto& features = elements[i].features();
    if (features.size() != elements[0].size() || features[feature].first != name) {
      TANDEM_THROW(ShapeError, "batch: element ", i, " has features (", elements[i].describe(),
                   ") but element 0 has (", elements[0].describe(), ")");
    }
    const Tensor& t = features[feature].second;
    if (t.shape() != first.shape() || t.dtype() != first.dtype()) {
      TANDEM_THROW(ShapeError, "batch: feature '", name, "' of element ", i, " is ",
                   dtype_name(t.dtype()), " ", t.shape().to_string(), " but element 0's is ",
                   dtype_name(first.dtype()), " ", first.shape().to_string(),
                   " (pad or resize before batching)");
    }
    if (bytes > 0) std::memcpy(static_cast<char*>(out.raw_data()) + i * bytes, t.raw_data(), bytes);
  }
  return out;
}

}  // namespace

Dataset Dataset::filter(FilterFn predicate) const {
  if (!predicate) TANDEM_THROW(InvalidArgument, "filter needs a predicate");
  return Dataset(std::make_shared<SimpleNode>(node_, "filter", [predicate](int64_t) {
    return [predicate](IteratorBase& input, detail::Counters& c) -> std::optional<Element> {
      while (auto e = detail::timed_next(input, c)) {
        if (predicate(*e)) return e;
      }
      return std::nullopt;
    };
  }, nullptr));
}

Dataset Dataset::batch(int64_t batch_size, bool drop_remainder) const {
  if (batch_size < 1)
    TANDEM_THROW(InvalidArgument, "batch size must be at least 1, got ", batch_size);
  const std::string label =
      "batch(" + std::to_string(batch_size) + (drop_remainder ? ", drop_remainder)" : ")");
  return Dataset(std::make_shared<SimpleNode>(node_, label, [batch_size, drop_remainder](int64_t) {
    return [batch_size, drop_remainder](IteratorBase& input,
                                        detail::Counters& c) -> std::optional<Element> {
      std::vector<Element> elements;
      elements.reserve(static_cast<size_t>(batch_size));
      while (static_cast<int64_t>(elements.size()) < batch_size) {
        auto e = detail::timed_next(input, c);
        if (!e) break;
        elements.push_back(std::move(*e));
      }
      if (elements.empty() ||
          (drop_remainder && static_cast<int64_t>(elements.size()) < batch_size)) {
        return std::nullopt;
      }
      Element out;
      for (size_t f = 0; f < elements[0].size(); ++f)
        out.set(elements[0].features()[f].first, stack(elements, f));
      return out;
    };
  }, [batch_size, drop_remainder](int64_t n) {
    return drop_remainder ? n / batch_size : (n + batch_size - 1) / batch_size;
  }));
}

Dataset Dataset::shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration) const {
  if (buffer_size < 1)
    TANDEM_THROW(InvalidArgument, "shuffle buffer must be at least 1, got ", buffer_size);
  const std::string label = "shuffle(" + std::to_string(buffer_size) + ")";
  return Dataset(std::make_shared<SimpleNode>(node_, label, [=](int64_t pass) {
    struct State {
      std::vector<Element> buffer;
      Generator generator;
      bool input_done = false;
    };
    auto state = std::make_shared<State>();
    state->generator =
        Generator(mix_seed(seed, reshuffle_each_iteration ? static_cast<uint64_t>(pass) : 0));
    return
        [state, buffer_size](IteratorBase& input, detail::Counters& c) -> std::optional<Element> {
          while (!state->input_done && static_cast<int64_t>(state->buffer.size()) < buffer_size) {
            auto e = detail::timed_next(input, c);
            if (!e) {
              state->input_done = true;
              break;
            }
            state->buffer.push_back(std::move(*e));
          }
          if (state->buffer.empty()) return std::nullopt;
          const auto j = static_cast<size_t>(state->generator.next_below(state->buffer.size()));
          Element out = std::move(state->buffer[j]);
          state->buffer[j] = std::move(state->buffer.back());
          state->buffer.pop_back();
          return out;
        };
  }, same_count));
}

Dataset Dataset::take(int64_t count) const {
  if (count < 0) TANDEM_THROW(InvalidArgument, "take: negative count ", count);
  return Dataset(
      std::make_shared<SimpleNode>(node_, "take(" + std::to_string(count) + ")", [count](int64_t) {
        auto taken = std::make_shared<int64_t>(0);
        return [count, taken](IteratorBase& input, detail::Counters& c) -> std::optional<Element> {
          if (*taken >= count) return std::nullopt;
          auto e = detail::timed_next(input, c);
          if (e) ++*taken;
          return e;
        };
      }, [count](int64_t n) { return std::min(n, count); }));
}

Dataset Dataset::skip(int64_t count) const {
  if (count < 0) TANDEM_THROW(InvalidArgument, "skip: negative count ", count);
  return Dataset(
      std::make_shared<SimpleNode>(node_, "skip(" + std::to_string(count) + ")", [count](int64_t) {
        auto skipped = std::make_shared<bool>(false);
        return
            [count, skipped](IteratorBase& input, detail::Counters& c) -> std::optional<Element> {
              if (!*skipped) {
                *skipped = true;
                for (int64_t i = 0; i < count; ++i) {
                  if (!detail::timed_next(input, c)) return std::nullopt;
                }
              }
              return detail::timed_next(input, c);
            };
      }, [count](int64_t n) { return std::max<int64_t>(0, n - count); }));
}

Dataset Dataset::shard(int64_t num_shards, int64_t index) const {
  if (num_shards < 1 || index < 0 || index >= num_shards) {
    TANDEM_THROW(InvalidArgument, "shard: need 0 <= index < num_shards, got index ", index, " of ",
                 num_shards);
  }
  const std::string label =
      "shard(" + std::to_string(index) + "/" + std::to_string(num_shards) + ")";
  return Dataset(std::make_shared<SimpleNode>(node_, label, [num_shards, index](int64_t) {
    auto position = std::make_shared<int64_t>(0);
    return [num_shards, index, position](IteratorBase& input,
                                         detail::Counters& c) -> std::optional<Element> {
      while (auto e = detail::timed_next(input, c)) {
        if ((*position)++ % num_shards == index) return e;
      }
      return std::nullopt;
    };
  }, [num_shards, index](int64_t n) {
    return n > index ? (n - index + num_shards - 1) / num_shards : 0;
  }));
}

Dataset Dataset::repeat(int64_t count) const {
  const std::string label = count < 0 ? "repeat" : "repeat(" + std::to_string(count) + ")";
  // Repeat re-creates its input iterator, so it cannot use SimpleNode.
  class RepeatNode : public UnaryNode {
   public:
    RepeatNode(std::shared_ptr<Node> input, int64_t count, std::string label)
        : UnaryNode(std::move(input)), count_(count), label_(std::move(label)) {}
    std::unique_ptr<IteratorBase> make_iterator() override {
      struct It : IteratorBase {
        RepeatNode* node;
        std::unique_ptr<IteratorBase> input;
        int64_t passes_done = 0;
        bool produced_this_pass = false;
        std::optional<Element> next() override {
          for (;;) {
            if (node->count_ >= 0 && passes_done >= node->count_) return std::nullopt;
            if (!input) input = node->input_->make_iterator();
            if (auto e = detail::timed_next(*input, node->counters)) {
              produced_this_pass = true;
              node->counters.elements.fetch_add(1, std::memory_order_relaxed);
              return e;
            }
            input.reset();
            ++passes_done;
            // An empty input would otherwise repeat forever without output.
            if (!produced_this_pass) return std::nullopt;
            produced_this_pass = false;
          }
        }
      };
      auto it = std::make_unique<It>();
      it->node = this;
      return it;
    }
    std::string label() const override { return label_; }
    std::shared_ptr<Node> with_input(std::shared_ptr<Node> input) const override {
      return std::make_shared<RepeatNode>(std::move(input), count_, label_);
    }
    int64_t cardinality() const override {
      const int64_t n = input_->cardinality();
      if (n == 0 || count_ == 0) return 0;
      if (n < 0) return n;
      return count_ < 0 ? kInfiniteCardinality : n * count_;
    }

   private:
    int64_t count_;
    std::string label_;
  };
  return Dataset(std::make_shared<RepeatNode>(node_, count, label));
}

}  // namespace tandem::data
