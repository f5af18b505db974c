#include "tandem/data/tfrecord.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>

#include "tandem/base/error.h"
#include "tandem/data/crc32c.h"
#include "tandem/data/detail/node.h"

namespace tandem::data {

// A byte stream over a raw, gzip or zlib file.
class TFRecordReader::Stream {
 public:
  Stream(const std::string& path, Compression compression)
      : path_(path), compression_(compression) {
    if (compression == Compression::gzip) {
      gz_ = gzopen(path.c_str(), "rb");
      if (!gz_)
        TANDEM_THROW(IoError, "cannot open TFRecord file '", path, "': ", std::strerror(errno));
      gzbuffer(gz_, 1 << 18);
      return;
    }
    file_.open(path, std::ios::binary);
    if (!file_)
      TANDEM_THROW(IoError, "cannot open TFRecord file '", path, "': ", std::strerror(errno));
    if (compression == Compression::none) {
      std::error_code error;
      const uint64_t size = std::filesystem::file_size(path, error);
      if (!error) file_size_ = size;
    }
    if (compression == Compression::zlib) {
      std::memset(&z_, 0, sizeof(z_));
      if (inflateInit(&z_) != Z_OK)
        TANDEM_THROW(IoError, "zlib initialisation failed for '", path, "'");
      z_open_ = true;
      in_buffer_.resize(1 << 18);
    }
  }
  ~Stream() {
    if (gz_) gzclose_r(gz_);
    if (z_open_) inflateEnd(&z_);
  }

  // The bytes left to read when they are known (an uncompressed regular
  // file), so a record's length can be checked before its buffer exists.
  std::optional<uint64_t> remaining() const {
    if (!file_size_) return std::nullopt;
    return *file_size_ > consumed_ ? *file_size_ - consumed_ : 0;
  }

  // Reads n bytes in chunks. Unless the file's remaining size vouched for
  // them (`checked`), at most kUnverifiedReserve bytes are reserved up front
  // and the buffer grows only as data arrives, so a length that the stream
  // does not back costs about what the stream holds. Returns fewer bytes
  // only at the end of the stream.
  std::string read_growing(uint64_t n, bool checked) {
    constexpr uint64_t kUnverifiedReserve = uint64_t{64} << 20;
    constexpr uint64_t kChunk = uint64_t{1} << 20;
    std::string data;
    data.reserve(static_cast<size_t>(checked ? n : std::min(n, kUnverifiedReserve)));
    while (data.size() < n) {
      const size_t done = data.size();
      const auto chunk = static_cast<size_t>(std::min<uint64_t>(n - done, kChunk));
      data.resize(done + chunk);
      const size_t got = read(data.data() + done, chunk);
      data.resize(done + got);
      if (got < chunk) break;
    }
    return data;
  }

  // Reads up to n bytes; returns how many (fewer only at the end).
  size_t read(char* out, size_t n) {
    switch (compression_) {
      case Compression::none:
        file_.read(out, static_cast<std::streamsize>(n));
        consumed_ += static_cast<uint64_t>(file_.gcount());
        return static_cast<size_t>(file_.gcount());
      case Compression::gzip: {
        size_t done = 0;
        while (done < n) {
          const int got =
              gzread(gz_, out + done, static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30)));
          if (got < 0) {
            int code = 0;
            TANDEM_THROW(IoError, "TFRecord file '", path_, "': gzip error: ", gzerror(gz_, &code));
          }
          if (got == 0) {
            // A stream cut where a flush (Z_SYNC_FLUSH, as TensorFlow's
            // writer's flush()) left whole records would otherwise read
            // as a shorter, valid file.
            int code = 0;
            gzerror(gz_, &code);
            if (code == Z_BUF_ERROR) {
              TANDEM_THROW(IoError, "TFRecord file '", path_,
                           "' is truncated: its gzip stream ends without its trailer");
            }
            break;
          }
          done += static_cast<size_t>(got);
        }
        return done;
      }
      case Compression::zlib: {
        z_.next_out = reinterpret_cast<Bytef*>(out);
        z_.avail_out = static_cast<uInt>(n);
        while (z_.avail_out > 0 && !z_end_) {
          if (z_.avail_in == 0) {
            file_.read(in_buffer_.data(), static_cast<std::streamsize>(in_buffer_.size()));
            z_.next_in = reinterpret_cast<Bytef*>(in_buffer_.data());
            z_.avail_in = static_cast<uInt>(file_.gcount());
            if (z_.avail_in == 0) {
              TANDEM_THROW(IoError, "TFRecord file '", path_,
                           "' is truncated: its zlib stream ends before its end marker");
            }
          }
          const int status = inflate(&z_, Z_NO_FLUSH);
          if (status == Z_STREAM_END)
            z_end_ = true;
          else if (status != Z_OK && status != Z_BUF_ERROR) {
            TANDEM_THROW(IoError, "TFRecord file '", path_,
                         "': zlib error: ", z_.msg ? z_.msg : "corrupt stream");
          }
        }
        return n - z_.avail_out;
      }
    }
    return 0;
  }

 private:
  std::string path_;
  Compression compression_;
  std::ifstream file_;
  std::optional<uint64_t> file_size_;  // uncompressed regular files only
  uint64_t consumed_ = 0;
  gzFile gz_ = nullptr;
  z_stream z_{};
  bool z_open_ = false;
  bool z_end_ = false;
  std::vector<char> in_buffer_;
};

namespace {

uint64_t read_u64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint32_t read_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

Compression detect_compression(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) TANDEM_THROW(IoError, "cannot open '", path, "': ", std::strerror(errno));
  unsigned char head[12] = {};
  in.read(reinterpret_cast<char*>(head), 12);
  const auto got = in.gcount();
  if (got >= 2 && head[0] == 0x1F && head[1] == 0x8B) return Compression::gzip;
  if (got >= 12) {
    // A raw file starts with a length whose masked CRC follows it.
    if (read_u32(reinterpret_cast<const char*>(head) + 8) == masked_crc32c(head, 8))
      return Compression::none;
  }
  if (got >= 2 && (head[0] & 0x0F) == 8 && ((head[0] << 8) | head[1]) % 31 == 0)
    return Compression::zlib;
  return Compression::none;
}

TFRecordReader::TFRecordReader(const std::string& path, Compression compression)
    : stream_(std::make_unique<Stream>(path, compression)), path_(path) {}

TFRecordReader::~TFRecordReader() = default;

std::optional<std::string> TFRecordReader::next() {
  char header[12];
  const size_t got = stream_->read(header, 12);
  if (got == 0) return std::nullopt;
  if (got < 12) {
    TANDEM_THROW(IoError, "TFRecord file '", path_, "': record ", index_, " is truncated (", got,
                 " of 12 header bytes)");
  }
  const uint64_t length = read_u64(header);
  if (read_u32(header + 8) != masked_crc32c(header, 8)) {
    TANDEM_THROW(IoError, "TFRecord file '", path_, "': record ", index_,
                 " has a corrupt length (length CRC mismatch); wrong compression setting?");
  }
  if (length > kMaxRecordBytes) {
    TANDEM_THROW(IoError, "TFRecord file '", path_, "': record ", index_, " claims ", length,
                 " bytes, more than the ", kMaxRecordBytes, " (kMaxRecordBytes) a record may have");
  }
  const uint64_t needed = length + 4;  // the data and its CRC
  const std::optional<uint64_t> remaining = stream_->remaining();
  if (remaining && needed > *remaining) {
    TANDEM_THROW(IoError, "TFRecord file '", path_, "': record ", index_,
                 " is truncated: it claims ", length, " bytes (+4 for its CRC) but only ",
                 *remaining, " bytes are left in the file (or its length is corrupt)");
  }
  std::string data = stream_->read_growing(needed, remaining.has_value());
  if (data.size() < needed) {
    TANDEM_THROW(IoError, "TFRecord file '", path_, "': record ", index_, " is truncated (",
                 data.size(), " of ", needed, " bytes after the header)");
  }
  const uint32_t stored = read_u32(data.data() + length);
  data.resize(static_cast<size_t>(length));
  if (stored != masked_crc32c(data.data(), data.size())) {
    TANDEM_THROW(IoError, "TFRecord file '", path_, "': record ", index_,
                 " has corrupt data (data CRC mismatch)");
  }
  ++index_;
  return data;
}

int64_t count_tfrecord_records(const std::string& path) {
  std::error_code error;
  const uint64_t size = std::filesystem::file_size(path, error);
  std::ifstream in(path, std::ios::binary);
  if (error || !in) return -1;
  int64_t records = 0;
  uint64_t offset = 0;
  while (offset < size) {
    char header[12];
    if (size - offset < 12 || !in.read(header, 12)) return -1;
    const uint64_t length = read_u64(header);
    if (read_u32(header + 8) != masked_crc32c(header, 8)) return -1;
    // The record and its CRC must fit in what the file has left.
    if (length > size - offset - 12 || size - offset - 12 - length < 4) return -1;
    offset += 12 + length + 4;
    in.seekg(static_cast<std::streamoff>(offset));
    ++records;
  }
  return records;
}

void write_tfrecord(const std::string& path, const std::vector<std::string>& records,
                    Compression compression) {
  std::string bytes;
  for (const std::string& r : records) {
    const uint64_t length = r.size();
    char header[12];
    std::memcpy(header, &length, 8);
    const uint32_t length_crc = masked_crc32c(header, 8);
    std::memcpy(header + 8, &length_crc, 4);
    bytes.append(header, 12);
    bytes += r;
    const uint32_t data_crc = masked_crc32c(r.data(), r.size());
    bytes.append(reinterpret_cast<const char*>(&data_crc), 4);
  }
  if (compression == Compression::gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    if (!f || gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) !=
                  static_cast<int>(bytes.size())) {
      if (f) gzclose(f);
      TANDEM_THROW(IoError, "cannot write '", path, "'");
    }
    gzclose(f);
    return;
  }
  if (compression == Compression::zlib) {
    uLongf size = compressBound(bytes.size());
    std::string packed(size, '\0');
    if (compress(reinterpret_cast<Bytef*>(packed.data()), &size,
                 reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()) != Z_OK) {
      TANDEM_THROW(IoError, "zlib compression failed for '", path, "'");
    }
    packed.resize(size);
    bytes = std::move(packed);
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) TANDEM_THROW(IoError, "cannot write '", path, "'");
}

namespace {

class TFRecordNode : public detail::Node {
 public:
  TFRecordNode(std::vector<std::string> paths, Compression compression, bool with_origin)
      : paths_(std::move(paths)), compression_(compression), with_origin_(with_origin) {}
  std::unique_ptr<IteratorBase> make_iterator() override {
    struct It : IteratorBase {
      TFRecordNode* node;
      size_t file = 0;
      int64_t index = 0;  // of the next record in the file
      std::unique_ptr<TFRecordReader> reader;
      std::optional<Element> next() override {
        const auto start = detail::Clock::now();
        while (file < node->paths_.size()) {
          if (!reader)
            reader = std::make_unique<TFRecordReader>(node->paths_[file], node->compression_);
          if (auto record = reader->next()) {
            node->counters.busy_ns.fetch_add(detail::elapsed_ns(start), std::memory_order_relaxed);
            node->counters.elements.fetch_add(1, std::memory_order_relaxed);
            Element e{{"record", bytes_tensor(*record)}};
            if (node->with_origin_) {
              e.set("origin",
                    bytes_tensor(node->paths_[file] + " record " + std::to_string(index)));
            }
            ++index;
            return e;
          }
          reader.reset();
          ++file;
          index = 0;
        }
        return std::nullopt;
      }
    };
    auto it = std::make_unique<It>();
    it->node = this;
    return it;
  }
  std::string label() const override {
    return "tfrecord(" + std::to_string(paths_.size()) + " files)";
  }
  std::vector<std::string> files() const override { return paths_; }
  std::shared_ptr<detail::Node> with_files(std::vector<std::string> files) const override {
    return std::make_shared<TFRecordNode>(std::move(files), compression_, with_origin_);
  }
  // Uncompressed files are counted once by walking their record headers.
  int64_t cardinality() const override {
    std::call_once(counted_, [this] {
      int64_t total = 0;
      for (const std::string& path : paths_) {
        const Compression c =
            compression_ == Compression::none ? detect_compression(path) : compression_;
        const int64_t n = c == Compression::none ? count_tfrecord_records(path) : -1;
        if (n < 0) {
          total = kUnknownCardinality;
          break;
        }
        total += n;
      }
      cardinality_ = total;
    });
    return cardinality_;
  }

 private:
  std::vector<std::string> paths_;
  Compression compression_;
  bool with_origin_;
  mutable std::once_flag counted_;
  mutable int64_t cardinality_ = kUnknownCardinality;
};

}  // namespace

Dataset Dataset::from_tfrecord(std::vector<std::string> paths, Compression compression,
                               bool with_origin) {
  if (paths.empty()) TANDEM_THROW(InvalidArgument, "from_tfrecord needs at least one file");
  return Dataset(std::make_shared<TFRecordNode>(std::move(paths), compression, with_origin));
}

}  // namespace tandem::data
