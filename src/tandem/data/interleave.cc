// interleave: keeps cycle_length input elements open as datasets and takes
// block_length elements from each in turn; a finished dataset's place goes to
// the next input element. The order is deterministic. With parallel calls each
// open dataset is read ahead by its own prefetching thread, so reading
// several files overlaps. The datasets opened in pass k start their own pass
// k, so that a shuffle or a random map inside them draws a new order each
// epoch (and pass k's, whatever passes came before).
#include "tandem/base/error.h"
#include "tandem/data/dataset.h"
#include "tandem/data/detail/node.h"

namespace tandem::data {
namespace {

class InterleaveNode : public detail::UnaryNode {
 public:
  InterleaveNode(std::shared_ptr<detail::Node> input, InterleaveFn fn, InterleaveOptions options)
      : UnaryNode(std::move(input)), fn_(std::move(fn)), options_(options) {}
  std::unique_ptr<IteratorBase> make_iterator() override;
  std::shared_ptr<detail::Node> with_input(std::shared_ptr<detail::Node> input) const override {
    return std::make_shared<InterleaveNode>(std::move(input), fn_, options_);
  }
  bool expands_elements() const override { return true; }
  std::string label() const override {
    const std::string p = options_.num_parallel_calls == kAutotune
                              ? "autotune"
                              : std::to_string(options_.num_parallel_calls);
    return "interleave(cycle " + std::to_string(options_.cycle_length) + ", block " +
           std::to_string(options_.block_length) + ", parallel " + p + ")";
  }
  const InterleaveFn fn_;
  const InterleaveOptions options_;
};

class InterleaveIterator : public IteratorBase {
 public:
  InterleaveIterator(InterleaveNode* node, std::unique_ptr<IteratorBase> input, int64_t pass)
      : node_(node),
        input_(std::move(input)),
        pass_(pass),
        slots_(static_cast<size_t>(node->options_.cycle_length)) {}

  std::optional<Element> next() override {
    for (;;) {
      for (auto& slot : slots_) {
        if (!slot.open && !input_done_) open(slot);
      }
      Slot& slot = slots_[current_];
      if (!slot.open) {
        if (input_done_ && none_open()) return std::nullopt;
        advance();
        continue;
      }
      std::optional<Element> e = slot.iterator.next();
      if (!e) {
        slot = Slot{};  // its place goes to the next input element (opened above)
        continue;
      }
      if (++slot.taken >= node_->options_.block_length) advance();
      node_->counters.elements.fetch_add(1, std::memory_order_relaxed);
      return e;
    }
  }

 private:
  struct Slot {
    bool open = false;
    Iterator iterator;
    int taken = 0;
  };

  bool none_open() const {
    for (const auto& s : slots_) {
      if (s.open) return false;
    }
    return true;
  }

  void advance() {
    slots_[current_].taken = 0;
    current_ = (current_ + 1) % slots_.size();
  }

  void open(Slot& slot) {
    std::optional<Element> e = detail::timed_next(*input_, node_->counters);
    if (!e) {
      input_done_ = true;
      return;
    }
    const auto start = detail::Clock::now();
    Dataset d = node_->fn_(*e);
    if (node_->options_.num_parallel_calls == kAutotune) {
      // Each open dataset is read ahead; its buffer grows while this
      // interleave keeps finding it empty.
      d = d.prefetch(kAutotune);
    } else if (node_->options_.num_parallel_calls != 1) {
      d = d.prefetch(std::max(2, node_->options_.block_length));
    }
    slot.iterator = d.iterator(pass_);
    slot.open = true;
    slot.taken = 0;
    node_->counters.busy_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
  }

  InterleaveNode* node_;
  std::unique_ptr<IteratorBase> input_;
  int64_t pass_;
  std::vector<Slot> slots_;
  size_t current_ = 0;
  bool input_done_ = false;
};

std::unique_ptr<IteratorBase> InterleaveNode::make_iterator() {
  return std::make_unique<InterleaveIterator>(this, input_->make_iterator(), next_pass());
}

}  // namespace

Dataset Dataset::interleave(InterleaveFn fn, InterleaveOptions options) const {
  if (!fn) TANDEM_THROW(InvalidArgument, "interleave needs a function");
  if (options.cycle_length < 1 || options.block_length < 1) {
    TANDEM_THROW(InvalidArgument, "interleave: cycle and block lengths must be at least 1, got ",
                 options.cycle_length, " and ", options.block_length);
  }
  if (options.num_parallel_calls < 1 && options.num_parallel_calls != kAutotune) {
    TANDEM_THROW(InvalidArgument,
                 "interleave: num_parallel_calls must be at least 1 or kAutotune, got ",
                 options.num_parallel_calls);
  }
  return Dataset(std::make_shared<InterleaveNode>(node_, std::move(fn), options));
}

}  // namespace tandem::data
