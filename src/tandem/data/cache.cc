// cache: the first complete pass records every element (in memory, or in a
// file written to a temporary name and renamed when the pass completes);
// later passes replay the record without running the upstream pipeline. An
// incomplete pass leaves no cache behind, so a stopped epoch never yields a
// truncated dataset later.
//
// File format: "TNDMCACH", then per element: u32 feature count, and per
// feature: u32 name length, name, u8 dtype, u8 rank, i64 dims, u64 bytes, data.
// Replay checks every count and size against the bytes the file has left
// before allocating.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>

#include <unistd.h>

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

// A cache file being replayed, with the bytes it has left: every count and
// size an element declares is checked against them before it is allocated.
class CacheInput {
 public:
  explicit CacheInput(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    std::error_code error;
    const uint64_t size = std::filesystem::file_size(path, error);
    char magic[8];
    if (!in_ || error || size < 8 || !in_.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) {
      TANDEM_THROW(IoError, "'", path, "' is not a tandem cache file");
    }
    remaining_ = size - 8;
  }

  const std::string& path() const { return path_; }
  uint64_t remaining() const { return remaining_; }
  // Reads n bytes; false when the file does not have them.
  bool read(void* out, uint64_t n) {
    if (n > remaining_ || !in_.read(static_cast<char*>(out), static_cast<std::streamsize>(n)))
      return false;
    remaining_ -= n;
    return true;
  }
  template <typename T>
  bool get(T& value) {
    return read(&value, sizeof(T));
  }

 private:
  std::string path_;
  std::ifstream in_;
  uint64_t remaining_ = 0;
};

// The smallest feature record: name length, dtype, rank, byte count.
constexpr uint64_t kMinFeatureBytes = 4 + 1 + 1 + 8;
// Feature names longer than this are taken for damage.
constexpr uint32_t kMaxNameBytes = 4096;

// Reads element `index`; nullopt at a clean end of file. Throws IoError on
// damage, naming the element, the feature and the sizes claimed and left.
std::optional<Element> read_element(CacheInput& in, int64_t index) {
  if (in.remaining() == 0) return std::nullopt;
  std::string where = "element " + std::to_string(index);
  auto damaged = [&](const std::string& what) -> IoError {
    return IoError("cache file '" + in.path() + "' is damaged (" + where + ": " + what +
                   "); delete it to rebuild the cache");
  };
  const auto left = [&] { return ", " + std::to_string(in.remaining()) + " bytes left"; };
  uint32_t features = 0;
  if (!in.get(features)) throw damaged("truncated feature count" + left());
  if (features > in.remaining() / kMinFeatureBytes)
    throw damaged("claims " + std::to_string(features) + " features" + left());
  Element e;
  for (uint32_t f = 0; f < features; ++f) {
    where = "element " + std::to_string(index) + ", feature " + std::to_string(f);
    uint32_t name_length = 0;
    if (!in.get(name_length)) throw damaged("truncated feature header" + left());
    if (name_length > kMaxNameBytes || name_length > in.remaining()) {
      throw damaged("claims a name of " + std::to_string(name_length) + " bytes (at most " +
                    std::to_string(kMaxNameBytes) + ")" + left());
    }
    std::string name(name_length, '\0');
    uint8_t dtype = 0, rank = 0;
    if (!in.read(name.data(), name_length) || !in.get(dtype) || !in.get(rank))
      throw damaged("truncated feature header" + left());
    where += " '" + name + "'";
    if (rank > Shape::kMaxRank || !is_dtype_code(dtype)) {
      throw damaged("rank " + std::to_string(rank) + ", dtype " + std::to_string(dtype) +
                    " (at most rank " + std::to_string(Shape::kMaxRank) + ", dtype " +
                    std::to_string(static_cast<int>(DType::i64)) + ")");
    }
    std::vector<int64_t> dims(rank);
    for (auto& d : dims) {
      if (!in.get(d)) throw damaged("truncated shape" + left());
      if (d < 0) throw damaged("negative dimension " + std::to_string(d));
    }
    uint64_t nbytes = 0;
    try {
      nbytes = Tensor::checked_nbytes(Shape(dims), static_cast<DType>(dtype));
    } catch (const ShapeError& error) {
      throw damaged(error.what());
    }
    uint64_t bytes = 0;
    if (!in.get(bytes)) throw damaged("truncated byte count" + left());
    if (bytes != nbytes) {
      throw damaged("claims " + std::to_string(bytes) + " bytes, its shape and dtype need " +
                    std::to_string(nbytes));
    }
    if (bytes > in.remaining())
      throw damaged("claims " + std::to_string(bytes) + " bytes of data" + left());
    Tensor t = Tensor::empty(Shape(dims), static_cast<DType>(dtype));
    if (!in.read(t.raw_data(), bytes)) throw damaged("truncated data" + left());
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
  bool counts_positions() const override { return !path_.empty(); }

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
  FileReplay(CacheNode* node) : node_(node), in_(node->path_) {}
  std::optional<Element> next() override {
    const auto start = detail::Clock::now();
    auto e = read_element(in_, index_);
    node_->counters.busy_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
    if (e) {
      ++index_;
      node_->counters.elements.fetch_add(1, std::memory_order_relaxed);
    }
    return e;
  }

 private:
  CacheNode* node_;
  CacheInput in_;
  int64_t index_ = 0;
};

// Runs the upstream pipeline and records what passes through.
class Recorder : public IteratorBase {
 public:
  Recorder(CacheNode* node, std::unique_ptr<IteratorBase> input)
      : node_(node), input_(std::move(input)) {
    if (!node_->path_.empty()) {
      // Unique to this process and recorder (processes sharing a folder
      // may record at once).
      temporary_ = node_->path_ + ".tmp." + std::to_string(::getpid()) + "." +
                   std::to_string(reinterpret_cast<uintptr_t>(this));
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
