// In-memory, file-list and program sources: from_tensors, from_elements,
// range, from_idx, from_files, from_generator.
#include <limits>

#include "tandem/base/error.h"
#include "tandem/data/batching.h"
#include "tandem/data/dataset.h"
#include "tandem/data/detail/node.h"
#include "tandem/data/idx.h"

namespace tandem::data {
namespace {

// Yields elements[i] for i in order; elements are built on demand by `make`.
// With `gather` (the elements at given positions, stacked), the source has
// random access: batches over it and its selections gather rows at once.
class IndexedNode : public detail::Node {
 public:
  using Gather = std::function<Element(std::span<const int64_t> positions)>;

  IndexedNode(std::string label, int64_t count, std::function<Element(int64_t)> make,
              Gather gather = nullptr)
      : label_(std::move(label)),
        count_(count),
        make_(std::move(make)),
        gather_(std::move(gather)) {}

  std::unique_ptr<detail::PositionIterator> make_position_iterator() override {
    if (!gather_) return nullptr;
    struct It : detail::PositionIterator {
      int64_t next_index = 0, count = 0;
      std::optional<int64_t> next() override {
        if (next_index >= count) return std::nullopt;
        return next_index++;
      }
    };
    auto it = std::make_unique<It>();
    it->count = count_;
    return it;
  }
  bool random_access() const override { return gather_ != nullptr; }
  Element gather(std::span<const int64_t> positions) override {
    if (!gather_) return Node::gather(positions);
    const auto start = detail::Clock::now();
    Element e = gather_(positions);
    counters.busy_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
    counters.elements.fetch_add(static_cast<int64_t>(positions.size()), std::memory_order_relaxed);
    return e;
  }

  std::unique_ptr<IteratorBase> make_iterator() override {
    struct It : IteratorBase {
      IndexedNode* node;
      int64_t next_index = 0;
      std::optional<Element> next() override {
        if (next_index >= node->count_) return std::nullopt;
        const auto start = detail::Clock::now();
        Element e = node->make_(next_index++);
        node->counters.busy_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
        node->counters.elements.fetch_add(1, std::memory_order_relaxed);
        return e;
      }
    };
    auto it = std::make_unique<It>();
    it->node = this;
    return it;
  }
  std::string label() const override { return label_; }
  int64_t cardinality() const override { return count_; }

 private:
  std::string label_;
  int64_t count_;
  std::function<Element(int64_t)> make_;
  Gather gather_;
};

// Row i of t, shaped like t without its first dimension; shares t's memory.
Tensor row(const Tensor& t, int64_t i) {
  std::vector<int64_t> dims = t.shape().to_vector();
  dims.erase(dims.begin());
  return t.slice(i, i + 1).reshape(Shape(dims));
}

}  // namespace

Dataset Dataset::from_tensors(std::vector<std::pair<std::string, Tensor>> columns) {
  if (columns.empty())
    TANDEM_THROW(InvalidArgument, "from_tensors needs at least one named tensor");
  const int64_t rows = columns[0].second.rank() > 0 ? columns[0].second.dim(0) : -1;
  for (const auto& [name, t] : columns) {
    if (!t.defined() || t.rank() == 0 || t.dim(0) != rows) {
      TANDEM_THROW(ShapeError, "from_tensors: every tensor needs the same first dimension; '", name,
                   "' is ", t.to_string(), ", '", columns[0].first, "' has ", rows, " rows");
    }
  }
  return Dataset(std::make_shared<IndexedNode>(
      "tensors", rows,
      [columns](int64_t i) {
        Element e;
        for (const auto& [name, t] : columns) e.set(name, row(t, i));
        return e;
      },
      [columns](std::span<const int64_t> positions) {
        Element e;
        for (const auto& [name, t] : columns) e.set(name, gather_rows(t, positions));
        return e;
      }));
}

Dataset Dataset::from_elements(std::vector<Element> elements) {
  const auto count = static_cast<int64_t>(elements.size());
  auto shared = std::make_shared<std::vector<Element>>(std::move(elements));
  return Dataset(std::make_shared<IndexedNode>("elements", count,
                                               [shared](int64_t i) { return (*shared)[i]; }));
}

namespace {

// A pass per make_pass call; the elements are counted as the pass yields them.
class GeneratorNode : public detail::Node {
 public:
  GeneratorNode(Dataset::PassFn make_pass, std::string label, int64_t cardinality)
      : make_pass_(std::move(make_pass)), label_(std::move(label)), cardinality_(cardinality) {}

  std::unique_ptr<IteratorBase> make_iterator() override {
    struct It : IteratorBase {
      GeneratorNode* node;
      std::unique_ptr<IteratorBase> pass;
      bool ended = false;
      std::optional<Element> next() override {
        // The user's iterator is not asked again once it said it was done
        // (a batch after a short last batch, a take longer than the pass).
        if (ended) return std::nullopt;
        const auto start = detail::Clock::now();
        std::optional<Element> e = pass->next();
        node->counters.busy_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
        if (e) node->counters.elements.fetch_add(1, std::memory_order_relaxed);
        ended = !e;
        return e;
      }
    };
    auto it = std::make_unique<It>();
    it->node = this;
    it->pass = make_pass_(next_pass());
    if (!it->pass) TANDEM_THROW(InvalidArgument, label_, ": the generator made no iterator");
    return it;
  }
  std::string label() const override { return label_; }
  int64_t cardinality() const override { return cardinality_; }

 private:
  Dataset::PassFn make_pass_;
  std::string label_;
  int64_t cardinality_;
};

}  // namespace

Dataset Dataset::from_generator(PassFn make_pass, std::string label, int64_t cardinality) {
  if (!make_pass) TANDEM_THROW(InvalidArgument, "from_generator: no function to make a pass");
  if (cardinality < 0 && cardinality != kUnknownCardinality &&
      cardinality != kInfiniteCardinality) {
    TANDEM_THROW(InvalidArgument, "from_generator: cardinality ", cardinality,
                 " is neither a count nor unknown nor infinite");
  }
  return Dataset(
      std::make_shared<GeneratorNode>(std::move(make_pass), std::move(label), cardinality));
}

Dataset Dataset::range(int64_t count) {
  // Its elements are int32 (the dtype of indices): past it they would wrap.
  if (count < 0 || count > int64_t{std::numeric_limits<int32_t>::max()} + 1) {
    TANDEM_THROW(InvalidArgument, "range: count ", count, " is outside [0, 2^31] (its elements ",
                 "are int32)");
  }
  return Dataset(
      std::make_shared<IndexedNode>("range(" + std::to_string(count) + ")", count, [](int64_t i) {
        Tensor t = Tensor::empty(Shape{}, DType::i32);
        t.data<int32_t>()[0] = static_cast<int32_t>(i);
        return Element{{"index", t}};
      }));
}

Dataset Dataset::from_idx(const std::string& images_path, const std::string& labels_path) {
  const Tensor images = read_idx(images_path);
  const Tensor labels = read_idx(labels_path).to(DType::i32);
  if (labels.rank() != 1 || images.rank() < 2 || images.dim(0) != labels.dim(0)) {
    TANDEM_THROW(IoError, "IDX files '", images_path, "' ", images.shape().to_string(), " and '",
                 labels_path, "' ", labels.shape().to_string(),
                 " do not pair up (need N images and N labels)");
  }
  return Dataset(std::make_shared<IndexedNode>(
      "idx", labels.dim(0),
      [images, labels](int64_t i) {
        return Element{{"image", row(images, i)}, {"label", row(labels, i)}};
      },
      [images, labels](std::span<const int64_t> positions) {
        return Element{{"image", gather_rows(images, positions)},
                       {"label", gather_rows(labels, positions)}};
      }));
}

namespace {

// The file list source: one {"filename"} element per path.
class FilesNode : public IndexedNode {
 public:
  explicit FilesNode(std::vector<std::string> paths)
      : IndexedNode("files(" + std::to_string(paths.size()) + ")",
                    static_cast<int64_t>(paths.size()),
                    [paths](int64_t i) {
                      return Element{{"filename", bytes_tensor(paths[i])}};
                    }),
        paths_(std::move(paths)) {}
  std::vector<std::string> files() const override { return paths_; }
  std::shared_ptr<detail::Node> with_files(std::vector<std::string> files) const override {
    return std::make_shared<FilesNode>(std::move(files));
  }
  bool yields_file_names() const override { return true; }

 private:
  std::vector<std::string> paths_;
};

}  // namespace

Dataset Dataset::from_files(std::vector<std::string> paths) {
  return Dataset(std::make_shared<FilesNode>(std::move(paths)));
}

}  // namespace tandem::data
