// Selections: shuffle, shard, take, skip. Each only picks and reorders its
// input's elements, so each is written once over an item type and runs
// either on elements or, under a batch over a random-access source
// (in-memory tensors), on source positions: the batch then gathers its rows
// in one copy per feature instead of building and stacking an element per
// row. Both runs select the same positions in the same order (one algorithm,
// one generator), so the batches are the same bytes.
#include <algorithm>
#include <functional>

#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/data/dataset.h"
#include "tandem/data/detail/node.h"

namespace tandem::data {
namespace {

using detail::Clock;

enum class SelectKind : uint8_t { shuffle, shard, take, skip };

struct SelectSpec {
  SelectKind kind = SelectKind::take;
  int64_t count = 0;  // shuffle: buffer; shard: shards; take, skip: elements
  int64_t index = 0;  // shard
  uint64_t seed = 0;  // shuffle
  bool reshuffle_each_iteration = true;
};

// One pass of a selection over items pulled from its input.
template <typename Item>
class Selection {
 public:
  using Pull = std::function<std::optional<Item>()>;

  Selection(const SelectSpec& spec, int64_t pass)
      : spec_(spec),
        generator_(
            mix_seed(spec.seed, spec.reshuffle_each_iteration ? static_cast<uint64_t>(pass) : 0)) {}

  std::optional<Item> next(const Pull& pull) {
    switch (spec_.kind) {
      case SelectKind::shuffle:
        return next_shuffled(pull);
      case SelectKind::shard:
        while (std::optional<Item> item = pull()) {
          if (seen_++ % spec_.count == spec_.index) return item;
        }
        return std::nullopt;
      case SelectKind::take: {
        if (seen_ >= spec_.count) return std::nullopt;
        std::optional<Item> item = pull();
        if (item) ++seen_;
        return item;
      }
      case SelectKind::skip:
        for (; seen_ < spec_.count; ++seen_) {
          if (!pull()) {
            seen_ = spec_.count;
            return std::nullopt;
          }
        }
        return pull();
    }
    return std::nullopt;
  }

 private:
  // Fills a buffer of spec.count items and yields a random one each time.
  std::optional<Item> next_shuffled(const Pull& pull) {
    while (!input_done_ && static_cast<int64_t>(buffer_.size()) < spec_.count) {
      std::optional<Item> item = pull();
      if (!item) {
        input_done_ = true;
        break;
      }
      buffer_.push_back(std::move(*item));
    }
    if (buffer_.empty()) return std::nullopt;
    const auto j = static_cast<size_t>(generator_.next_below(buffer_.size()));
    Item out = std::move(buffer_[j]);
    buffer_[j] = std::move(buffer_.back());
    buffer_.pop_back();
    return out;
  }

  SelectSpec spec_;
  Generator generator_;
  std::vector<Item> buffer_;
  bool input_done_ = false;
  int64_t seen_ = 0;
};

class SelectNode : public detail::UnaryNode {
 public:
  SelectNode(std::shared_ptr<detail::Node> input, SelectSpec spec)
      : UnaryNode(std::move(input)), spec_(spec) {}

  std::unique_ptr<IteratorBase> make_iterator() override {
    struct It : IteratorBase {
      It(SelectNode* n, std::unique_ptr<IteratorBase> in, int64_t pass)
          : node(n), input(std::move(in)), selection(n->spec_, pass) {}
      SelectNode* node;
      std::unique_ptr<IteratorBase> input;
      Selection<Element> selection;
      std::optional<Element> next() override {
        const auto start = Clock::now();
        int64_t waited = 0;
        std::optional<Element> e = selection.next([&] {
          const auto pull_start = Clock::now();
          std::optional<Element> item = input->next();
          waited += detail::elapsed_ns(pull_start);
          return item;
        });
        node->count(e.has_value(), detail::elapsed_ns(start) - waited, waited);
        return e;
      }
    };
    return std::make_unique<It>(this, input_->make_iterator(), next_pass());
  }

  std::unique_ptr<detail::PositionIterator> make_position_iterator() override {
    std::unique_ptr<detail::PositionIterator> input = input_->make_position_iterator();
    if (!input) return nullptr;
    struct It : detail::PositionIterator {
      It(SelectNode* n, std::unique_ptr<detail::PositionIterator> in, int64_t pass)
          : node(n), input(std::move(in)), selection(n->spec_, pass) {}
      SelectNode* node;
      std::unique_ptr<detail::PositionIterator> input;
      Selection<int64_t> selection;
      std::optional<int64_t> next() override {
        std::optional<int64_t> p = selection.next([&] { return input->next(); });
        node->count(p.has_value(), 0, 0);
        return p;
      }
    };
    return std::make_unique<It>(this, std::move(input), next_pass());
  }

  std::string label() const override {
    switch (spec_.kind) {
      case SelectKind::shuffle:
        return "shuffle(" + std::to_string(spec_.count) + ")";
      case SelectKind::shard:
        return "shard(" + std::to_string(spec_.index) + "/" + std::to_string(spec_.count) + ")";
      case SelectKind::take:
        return "take(" + std::to_string(spec_.count) + ")";
      case SelectKind::skip:
        return "skip(" + std::to_string(spec_.count) + ")";
    }
    return "select";
  }
  std::shared_ptr<detail::Node> with_input(std::shared_ptr<detail::Node> input) const override {
    return std::make_shared<SelectNode>(std::move(input), spec_);
  }
  bool reorders_only() const override { return spec_.kind == SelectKind::shuffle; }
  bool counts_positions() const override {
    return spec_.kind == SelectKind::take || spec_.kind == SelectKind::skip;
  }
  int64_t cardinality() const override {
    const int64_t n = input_->cardinality();
    if (n == kInfiniteCardinality && spec_.kind == SelectKind::take) return spec_.count;
    if (n < 0) return n;
    switch (spec_.kind) {
      case SelectKind::shuffle:
        return n;
      case SelectKind::shard:
        return n > spec_.index ? (n - spec_.index + spec_.count - 1) / spec_.count : 0;
      case SelectKind::take:
        return std::min(n, spec_.count);
      case SelectKind::skip:
        return std::max<int64_t>(0, n - spec_.count);
    }
    return kUnknownCardinality;
  }

 private:
  void count(bool produced, int64_t busy_ns, int64_t wait_ns) {
    if (produced) counters.elements.fetch_add(1, std::memory_order_relaxed);
    if (busy_ns > 0) counters.busy_ns.fetch_add(busy_ns, std::memory_order_relaxed);
    if (wait_ns > 0) counters.wait_ns.fetch_add(wait_ns, std::memory_order_relaxed);
  }

  SelectSpec spec_;
};

}  // namespace

Dataset Dataset::shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration) const {
  if (buffer_size < 1)
    TANDEM_THROW(InvalidArgument, "shuffle buffer must be at least 1, got ", buffer_size);
  return Dataset(std::make_shared<SelectNode>(
      node_, SelectSpec{.kind = SelectKind::shuffle,
                        .count = buffer_size,
                        .seed = seed,
                        .reshuffle_each_iteration = reshuffle_each_iteration}));
}

Dataset Dataset::take(int64_t count) const {
  if (count < 0) TANDEM_THROW(InvalidArgument, "take: negative count ", count);
  return Dataset(
      std::make_shared<SelectNode>(node_, SelectSpec{.kind = SelectKind::take, .count = count}));
}

Dataset Dataset::skip(int64_t count) const {
  if (count < 0) TANDEM_THROW(InvalidArgument, "skip: negative count ", count);
  return Dataset(
      std::make_shared<SelectNode>(node_, SelectSpec{.kind = SelectKind::skip, .count = count}));
}

Dataset Dataset::shard(int64_t num_shards, int64_t index) const {
  if (num_shards < 1 || index < 0 || index >= num_shards) {
    TANDEM_THROW(InvalidArgument, "shard: need 0 <= index < num_shards, got index ", index, " of ",
                 num_shards);
  }
  return Dataset(std::make_shared<SelectNode>(
      node_, SelectSpec{.kind = SelectKind::shard, .count = num_shards, .index = index}));
}

}  // namespace tandem::data
