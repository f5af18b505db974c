// Sequential transformations: filter, batch, padded_batch, repeat (the
// selections shuffle, shard, take and skip are in select.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tandem/base/error.h"
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

// The most elements or rows a batch reserves room for before reading: not
// batch_size at once, as batch(2^31) is "the whole dataset" to tf.data users.
constexpr int64_t kBatchReserveLimit = int64_t{1} << 16;

// Two (H, W, C) images that differ in their channels alone (gray, RGB).
bool only_channels_differ(const Shape& a, const Shape& b) {
  return a.rank() == 3 && b.rank() == 3 && a[0] == b[0] && a[1] == b[1] && a[2] != b[2] &&
         a[2] <= 4 && b[2] <= 4;
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
                   only_channels_differ(t.shape(), first.shape())
                       ? " (gray and colour images in one batch: decode them to one channel "
                         "count with `channels = 3` (or 1) in a data specification, "
                         "docs/training.md; in code, decode_image's channels)"
                       : " (examples of one batch share a shape: in a data specification, "
                         "images of different sizes take `resize = [HEIGHT, WIDTH]` and lists "
                         "of different lengths `variable_length = true`, docs/training.md; in "
                         "code, map a resize or use padded_batch)");
    }
    if (bytes > 0) std::memcpy(static_cast<char*>(out.raw_data()) + i * bytes, t.raw_data(), bytes);
  }
  return out;
}

// Checks that a batch's elements have the same features in the same order
// (ShapeError naming the first element that differs).
void check_same_features(const std::vector<Element>& elements, const char* op) {
  for (size_t i = 1; i < elements.size(); ++i) {
    const auto& a = elements[0].features();
    const auto& b = elements[i].features();
    bool same = a.size() == b.size();
    for (size_t f = 0; same && f < a.size(); ++f) same = a[f].first == b[f].first;
    if (!same) {
      TANDEM_THROW(ShapeError, op, ": element ", i, " has features (", elements[i].describe(),
                   ") but element 0 has (", elements[0].describe(), ")");
    }
  }
}

// One element of `dtype` holding `value`, as bytes; InvalidArgument naming
// the feature when the dtype cannot represent it.
std::vector<char> padding_bytes(const std::string& name, double value, DType dtype) {
  std::vector<char> bytes(dtype_size(dtype));
  auto integral_in = [&](double low, double high) {
    if (!(std::floor(value) == value && value >= low && value <= high)) {
      TANDEM_THROW(InvalidArgument, "padded_batch: padding value ", value, " for feature '", name,
                   "' does not fit its dtype ", dtype_name(dtype));
    }
  };
  switch (dtype) {
    case DType::i32: {
      integral_in(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
      const auto v = static_cast<int32_t>(value);
      std::memcpy(bytes.data(), &v, sizeof(v));
      break;
    }
    case DType::i64: {
      // Doubles hold every integer up to 2^53 exactly; the padding values past it are refused.
      integral_in(-9007199254740992.0, 9007199254740992.0);
      const auto v = static_cast<int64_t>(value);
      std::memcpy(bytes.data(), &v, sizeof(v));
      break;
    }
    case DType::u8: {
      integral_in(0, 255);
      bytes[0] = static_cast<char>(static_cast<uint8_t>(value));
      break;
    }
    case DType::f32: {
      const auto v = static_cast<float>(value);
      std::memcpy(bytes.data(), &v, sizeof(v));
      break;
    }
    default: {  // bf16, f16: the tensor layer's rounding
      const Tensor one = Tensor::full(Shape{}, static_cast<float>(value), dtype);
      std::memcpy(bytes.data(), one.raw_data(), bytes.size());
    }
  }
  return bytes;
}

// Feature `feature` of every element, each padded at the end of every
// dimension to the batch's largest (or the fixed sizes of `fixed`), stacked
// along a new dimension 0.
Tensor padded_stack(const std::vector<Element>& elements, size_t feature,
                    const PaddedBatchOptions& options) {
  const auto& [name, first] = elements[0].features()[feature];
  const int rank = first.rank();
  std::vector<int64_t> dims = first.shape().to_vector();
  for (size_t i = 1; i < elements.size(); ++i) {
    const Tensor& t = elements[i].features()[feature].second;
    if (t.rank() != rank || t.dtype() != first.dtype()) {
      TANDEM_THROW(ShapeError, "padded_batch: feature '", name, "' of element ", i, " is ",
                   dtype_name(t.dtype()), " ", t.shape().to_string(), " but element 0's is ",
                   dtype_name(first.dtype()), " ", first.shape().to_string(),
                   " (padding needs the same rank and dtype)");
    }
    for (int d = 0; d < rank; ++d) dims[d] = std::max(dims[d], t.dim(d));
  }
  if (const auto it = options.padded_shapes.find(name); it != options.padded_shapes.end()) {
    const std::vector<int64_t>& fixed = it->second;
    if (static_cast<int>(fixed.size()) != rank) {
      TANDEM_THROW(InvalidArgument, "padded_batch: padded shape for feature '", name, "' has ",
                   fixed.size(), " dimensions, its elements have ", rank, " (",
                   first.shape().to_string(), ")");
    }
    for (int d = 0; d < rank; ++d) {
      if (fixed[d] < 0) continue;
      if (fixed[d] < dims[d]) {
        TANDEM_THROW(ShapeError, "padded_batch: feature '", name, "' has size ", dims[d],
                     " in dimension ", d, ", more than its padded size ", fixed[d]);
      }
      dims[d] = fixed[d];
    }
  }
  const auto padding = options.padding_values.find(name);
  const std::vector<char> pad = padding_bytes(
      name, padding == options.padding_values.end() ? 0.0 : padding->second, first.dtype());
  dims.insert(dims.begin(), static_cast<int64_t>(elements.size()));
  int64_t total = 1;
  for (int64_t d : dims) {
    if (d > 0 && total > std::numeric_limits<int64_t>::max() / 16 / d) {
      TANDEM_THROW(ShapeError, "padded_batch: feature '", name, "' padded to ",
                   Shape(dims).to_string(), " does not fit in memory");
    }
    total *= d;
  }
  Tensor out = Tensor::empty(Shape(dims), first.dtype());
  const size_t esize = pad.size();
  auto* dst = static_cast<char*>(out.raw_data());
  if (std::all_of(pad.begin(), pad.end(), [](char b) { return b == 0; })) {
    std::memset(dst, 0, out.nbytes());
  } else {
    for (size_t i = 0; i < static_cast<size_t>(total); ++i)
      std::memcpy(dst + i * esize, pad.data(), esize);
  }
  // Strides (elements) of the padded element shape dims[1..].
  std::vector<int64_t> stride(static_cast<size_t>(rank) + 1, 1);
  for (int d = rank - 1; d >= 0; --d) stride[d] = stride[d + 1] * dims[d + 1];
  for (size_t i = 0; i < elements.size(); ++i) {
    const Tensor& t = elements[i].features()[feature].second;
    if (t.numel() == 0) continue;
    const auto* src = static_cast<const char*>(t.raw_data());
    char* base = dst + i * static_cast<size_t>(stride[0]) * esize;
    if (rank == 0) {
      std::memcpy(base, src, esize);
      continue;
    }
    // Copy the element row by row (its last dimension is contiguous in both).
    const size_t row_bytes = static_cast<size_t>(t.dim(rank - 1)) * esize;
    const int64_t rows = t.numel() / t.dim(rank - 1);
    std::vector<int64_t> index(static_cast<size_t>(rank), 0);  // over dims 0..rank-2
    for (int64_t r = 0; r < rows; ++r) {
      int64_t offset = 0;
      for (int d = 0; d + 1 < rank; ++d) offset += index[d] * stride[d + 1];
      std::memcpy(base + static_cast<size_t>(offset) * esize,
                  src + static_cast<size_t>(r) * row_bytes, row_bytes);
      for (int d = rank - 2; d >= 0; --d) {
        if (++index[d] < t.dim(d)) break;
        index[d] = 0;
      }
    }
  }
  return out;
}

// Pulls up to batch_size elements; empty at the end (or a short batch when
// drop_remainder).
std::vector<Element> next_elements(IteratorBase& input, detail::Counters& c, int64_t batch_size,
                                   bool drop_remainder) {
  std::vector<Element> elements;
  elements.reserve(static_cast<size_t>(std::min(batch_size, kBatchReserveLimit)));
  while (static_cast<int64_t>(elements.size()) < batch_size) {
    auto e = detail::timed_next(input, c);
    if (!e) break;
    elements.push_back(std::move(*e));
  }
  if (drop_remainder && static_cast<int64_t>(elements.size()) < batch_size) elements.clear();
  return elements;
}

}  // namespace

Dataset Dataset::filter(FilterFn predicate) const {
  if (!predicate) TANDEM_THROW(InvalidArgument, "filter needs a predicate");
  return Dataset(std::make_shared<SimpleNode>(
      node_, "filter",
      [predicate](int64_t) {
        return [predicate](IteratorBase& input, detail::Counters& c) -> std::optional<Element> {
          while (auto e = detail::timed_next(input, c)) {
            if (predicate(*e)) return e;
          }
          return std::nullopt;
        };
      },
      nullptr));
}

namespace {

// batch(): stacks elements; over a random-access source (and selections of
// it) it gathers each batch's rows from the source at once instead.
class BatchNode : public SimpleNode {
 public:
  BatchNode(std::shared_ptr<Node> input, int64_t batch_size, bool drop_remainder)
      : SimpleNode(
            std::move(input),
            "batch(" + std::to_string(batch_size) + (drop_remainder ? ", drop_remainder)" : ")"),
            [batch_size, drop_remainder](int64_t) {
              return [batch_size, drop_remainder](IteratorBase& upstream,
                                                  detail::Counters& c) -> std::optional<Element> {
                const std::vector<Element> elements =
                    next_elements(upstream, c, batch_size, drop_remainder);
                if (elements.empty()) return std::nullopt;
                Element out;
                for (size_t f = 0; f < elements[0].size(); ++f)
                  out.set(elements[0].features()[f].first, stack(elements, f));
                return out;
              };
            },
            [batch_size, drop_remainder](int64_t n) {
              return drop_remainder ? n / batch_size : (n + batch_size - 1) / batch_size;
            }),
        batch_size_(batch_size),
        drop_remainder_(drop_remainder) {}

  std::unique_ptr<IteratorBase> make_iterator() override {
    std::shared_ptr<Node> source = input_;
    while (source->input()) source = source->input();
    std::unique_ptr<detail::PositionIterator> positions;
    if (source->random_access()) positions = input_->make_position_iterator();
    if (!positions) return SimpleNode::make_iterator();
    next_pass();  // as the element path numbers this stage's passes
    struct It : IteratorBase {
      BatchNode* node;
      std::shared_ptr<Node> source;
      std::unique_ptr<detail::PositionIterator> positions;
      std::optional<Element> next() override {
        const auto start = Clock::now();
        std::vector<int64_t> rows;
        rows.reserve(static_cast<size_t>(std::min(node->batch_size_, kBatchReserveLimit)));
        while (static_cast<int64_t>(rows.size()) < node->batch_size_) {
          const std::optional<int64_t> p = positions->next();
          if (!p) break;
          rows.push_back(*p);
        }
        if (rows.empty() ||
            (node->drop_remainder_ && static_cast<int64_t>(rows.size()) < node->batch_size_))
          return std::nullopt;
        Element out = source->gather(rows);
        node->counters.busy_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
        node->counters.elements.fetch_add(1, std::memory_order_relaxed);
        return out;
      }
    };
    auto it = std::make_unique<It>();
    it->node = this;
    it->source = std::move(source);
    it->positions = std::move(positions);
    return it;
  }
  std::shared_ptr<Node> with_input(std::shared_ptr<Node> input) const override {
    return std::make_shared<BatchNode>(std::move(input), batch_size_, drop_remainder_);
  }

 private:
  int64_t batch_size_;
  bool drop_remainder_;
};

}  // namespace

Dataset Dataset::batch(int64_t batch_size, bool drop_remainder) const {
  if (batch_size < 1)
    TANDEM_THROW(InvalidArgument, "batch size must be at least 1, got ", batch_size);
  return Dataset(std::make_shared<BatchNode>(node_, batch_size, drop_remainder));
}

Dataset Dataset::padded_batch(int64_t batch_size, PaddedBatchOptions options) const {
  if (batch_size < 1)
    TANDEM_THROW(InvalidArgument, "batch size must be at least 1, got ", batch_size);
  for (const auto& [name, shape] : options.padded_shapes) {
    for (int64_t d : shape) {
      if (d < -1) {
        TANDEM_THROW(InvalidArgument, "padded_batch: padded shape for feature '", name,
                     "' has size ", d, " (expected -1 for the batch's largest, or >= 0)");
      }
    }
  }
  const std::string label = "padded_batch(" + std::to_string(batch_size) +
                            (options.drop_remainder ? ", drop_remainder)" : ")");
  auto shared = std::make_shared<const PaddedBatchOptions>(std::move(options));
  return Dataset(std::make_shared<SimpleNode>(
      node_, label,
      [batch_size, shared](int64_t) {
        return [batch_size, shared](IteratorBase& input,
                                    detail::Counters& c) -> std::optional<Element> {
          const std::vector<Element> elements =
              next_elements(input, c, batch_size, shared->drop_remainder);
          if (elements.empty()) return std::nullopt;
          check_same_features(elements, "padded_batch");
          // An option naming no feature is a typo; say so instead of ignoring it.
          auto check_named = [&](const std::string& name, const char* option) {
            if (!elements[0].has(name)) {
              TANDEM_THROW(InvalidArgument, "padded_batch: ", option, " names feature '", name,
                           "' but the elements have (", elements[0].describe(), ")");
            }
          };
          for (const auto& entry : shared->padded_shapes) check_named(entry.first, "padded_shapes");
          for (const auto& entry : shared->padding_values)
            check_named(entry.first, "padding_values");
          Element out;
          for (size_t f = 0; f < elements[0].size(); ++f)
            out.set(elements[0].features()[f].first, padded_stack(elements, f, *shared));
          return out;
        };
      },
      [batch_size, drop = shared->drop_remainder](int64_t n) {
        return drop ? n / batch_size : (n + batch_size - 1) / batch_size;
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
        bool ended = false;
        std::optional<Element> next() override {
          for (;;) {
            if (ended || (node->count_ >= 0 && passes_done >= node->count_)) return std::nullopt;
            if (!input) input = node->input_->make_iterator();
            if (auto e = detail::timed_next(*input, node->counters)) {
              produced_this_pass = true;
              node->counters.elements.fetch_add(1, std::memory_order_relaxed);
              return e;
            }
            input.reset();
            ++passes_done;
            // An empty pass of an endless repeat would repeat forever
            // without output: it ends it (for good). A counted repeat goes
            // on to its next pass.
            if (!produced_this_pass && node->count_ < 0) {
              ended = true;
              return std::nullopt;
            }
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
    int64_t input_passes_per_pass() const override {
      return count_ > 0 ? count_ : count_ < 0 ? int64_t{1} << 32 : 1;
    }

   private:
    int64_t count_;
    std::string label_;
  };
  return Dataset(std::make_shared<RepeatNode>(node_, count, label));
}

}  // namespace tandem::data
