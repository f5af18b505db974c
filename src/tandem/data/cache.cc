// cache: the first complete pass records every element (in memory, or in a
// file written to a temporary name and renamed when the pass completes);
// later passes replay the record without running the upstream pipeline. An
// incomplete pass leaves no cache behind, so a stopped epoch never yields a
// truncated dataset later.
//
// File format: "TNDMCACH", then per element: u32 feature count, and per
// feature: u32 name length, name, u8 dtype, u8 rank, i64 dims, u64 bytes, data.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "tandem/base/error.h"
#include "tandem/data/dataset.h"
#include "tandem/data/detail/node.h"

namespace tandem::data {
namespace {

constexpr char kMagic[8] = {'T', 'N', 'D', 'M', 'C', 'A', 'C', 'H'};

template <typename T>
void put(std::ostream& out, T value) {
  out.write(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
bool get(std::istream& in, T& value) {
  return static_cast<bool>(in.read(reinterpret_cast<char*>(&value), sizeof(T)));
}

void write_element(std::ostream& out, const Element& e) {
  put<uint32_t>(out, static_cast<uint32_t>(e.size()));
  for (const auto& [name, t] : e.features()) {
    put<uint32_t>(out, static_cast<uint32_t>(name.size()));
    out.write(name.data(), static_cast<std::streamsize>(name.size()));
    put<uint8_t>(out, static_cast<uint8_t>(t.dtype()));
    put<uint8_t>(out, static_cast<uint8_t>(t.rank()));
    for (int64_t d : t.shape().dims()) put<int64_t>(out, d);
    put<uint64_t>(out, t.nbytes());
    out.write(static_cast<const char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
  }
}

// Reads one element; nullopt at a clean end of file. Throws IoError on damage.
std::optional<Element> read_element(std::istream& in, const std::string& path) {
  uint32_t features = 0;
  if (!get(in, features)) return std::nullopt;
  auto damaged = [&](const char* what) -> IoError {
    return IoError("cache file '" + path + "' is damaged (" + what +
                   "); delete it to rebuild the cache");
  };
  Element e;
  for (uint32_t f = 0; f < features; ++f) {
    uint32_t name_length = 0;
    if (!get(in, name_length) || name_length > 4096) throw damaged("feature name");
    std::string name(name_length, '\0');
    uint8_t dtype = 0, rank = 0;
    if (!in.read(name.data(), name_length) || !get(in, dtype) || !get(in, rank) ||
        rank > Shape::kMaxRank || dtype > static_cast<uint8_t>(DType::u8)) {
      throw damaged("feature header");
    }
    std::vector<int64_t> dims(rank);
    for (auto& d : dims) {
      if (!get(in, d) || d < 0) throw damaged("shape");
    }
    uint64_t bytes = 0;
    Tensor t = Tensor::empty(Shape(dims), static_cast<DType>(dtype));
    if (!get(in, bytes) || bytes != t.nbytes()) throw damaged("size");
    if (!in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(bytes)))
      throw damaged("truncated data");
    e.set(name, t);
  }
  return e;
}

class CacheNode : public detail::UnaryNode {
 public:
  CacheNode(std::shared_ptr<detail::Node> input, std::string path)
      : UnaryNode(std::move(input)), path_(std::move(path)) {}
  std::unique_ptr<IteratorBase> make_iterator() override;
  int64_t cardinality() const override { return input_->cardinality(); }
  std::string label() const override {
    return path_.empty() ? "cache(memory)" : "cache(" + path_ + ")";
  }
  std::shared_ptr<detail::Node> with_input(std::shared_ptr<detail::Node> input) const override {
    return std::make_shared<CacheNode>(std::move(input), path_);
  }

  const std::string path_;
  std::mutex mutex_;
  std::shared_ptr<const std::vector<Element>> memory_;  // set once a pass completed
};

// Replays the memory cache.
class MemoryReplay : public IteratorBase {
 public:
  MemoryReplay(CacheNode* node, std::shared_ptr<const std::vector<Element>> elements)
      : node_(node), elements_(std::move(elements)) {}
  std::optional<Element> next() override {
    if (next_ >= elements_->size()) return std::nullopt;
    node_->counters.elements.fetch_add(1, std::memory_order_relaxed);
    return (*elements_)[next_++];
  }

 private:
  CacheNode* node_;
  std::shared_ptr<const std::vector<Element>> elements_;
  size_t next_ = 0;
};

// Replays the file cache.
class FileReplay : public IteratorBase {
 public:
  FileReplay(CacheNode* node) : node_(node), in_(node->path_, std::ios::binary) {
    char magic[8];
    if (!in_.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) {
      TANDEM_THROW(IoError, "'", node->path_, "' is not a tandem cache file");
    }
  }
  std::optional<Element> next() override {
    const auto start = detail::Clock::now();
    auto e = read_element(in_, node_->path_);
    node_->counters.busy_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
    if (e) node_->counters.elements.fetch_add(1, std::memory_order_relaxed);
    return e;
  }

 private:
  CacheNode* node_;
  std::ifstream in_;
};

// Runs the upstream pipeline and records what passes through.
class Recorder : public IteratorBase {
 public:
  Recorder(CacheNode* node, std::unique_ptr<IteratorBase> input)
      : node_(node), input_(std::move(input)) {
    if (!node_->path_.empty()) {
      temporary_ = node_->path_ + ".tmp." + std::to_string(reinterpret_cast<uintptr_t>(this));
      out_.open(temporary_, std::ios::binary | std::ios::trunc);
      if (!out_) TANDEM_THROW(IoError, "cannot write cache file '", temporary_, "'");
      out_.write(kMagic, 8);
    }
  }
  ~Recorder() override {
    if (!temporary_.empty() && !completed_) {
      out_.close();
      std::remove(temporary_.c_str());
    }
  }
  std::optional<Element> next() override {
    auto e = detail::timed_next(*input_, node_->counters);
    if (!e) {
      complete();
      return std::nullopt;
    }
    const auto start = detail::Clock::now();
    if (temporary_.empty()) {
      recorded_.push_back(*e);
    } else {
      write_element(out_, *e);
      if (!out_) TANDEM_THROW(IoError, "writing cache file '", temporary_, "' failed (disk full?)");
    }
    node_->counters.busy_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
    node_->counters.elements.fetch_add(1, std::memory_order_relaxed);
    return e;
  }

 private:
  void complete() {
    if (completed_) return;
    completed_ = true;
    std::lock_guard<std::mutex> lock(node_->mutex_);
    if (temporary_.empty()) {
      if (!node_->memory_)
        node_->memory_ = std::make_shared<const std::vector<Element>>(std::move(recorded_));
      return;
    }
    out_.close();
    if (!out_ || std::rename(temporary_.c_str(), node_->path_.c_str()) != 0) {
      std::remove(temporary_.c_str());
      TANDEM_THROW(IoError, "cannot complete cache file '", node_->path_, "'");
    }
  }

  CacheNode* node_;
  std::unique_ptr<IteratorBase> input_;
  std::vector<Element> recorded_;
  std::string temporary_;
  std::ofstream out_;
  bool completed_ = false;
};

std::unique_ptr<IteratorBase> CacheNode::make_iterator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (memory_) return std::make_unique<MemoryReplay>(this, memory_);
  }
  if (!path_.empty() && std::filesystem::exists(path_)) return std::make_unique<FileReplay>(this);
  return std::make_unique<Recorder>(this, input_->make_iterator());
}

}  // namespace

Dataset Dataset::cache(const std::string& path) const {
  return Dataset(std::make_shared<CacheNode>(node_, path));
}

}  // namespace tandem::data
