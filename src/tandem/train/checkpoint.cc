#include "tandem/train/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tandem/base/atomic_file.h"
#include "tandem/base/detail/json_integer.h"
#include "tandem/base/error.h"

namespace tandem::train {
namespace {

constexpr char kMagic[8] = {'T', 'N', 'D', 'M', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr size_t kAlignment = 64;

size_t align_up(size_t n) {
  return (n + kAlignment - 1) / kAlignment * kAlignment;
}

template <typename T>
void append_pod(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

template <typename T>
T read_pod(const std::string& in, size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof(T));
  return value;
}

// The CRC-32 of `crc`'s bytes followed by these (crc 0: none before).
uint32_t crc_update(uint32_t crc, const char* data, size_t bytes) {
  while (bytes > 0) {
    const auto chunk = static_cast<uInt>(std::min<size_t>(bytes, 1u << 30));
    crc = static_cast<uint32_t>(crc32(crc, reinterpret_cast<const Bytef*>(data), chunk));
    data += chunk;
    bytes -= chunk;
  }
  return crc;
}

uint32_t crc_of(const char* data, size_t bytes) {
  return crc_update(0, data, bytes);
}

// Magic, version and header length.
constexpr size_t kFixed = sizeof(kMagic) + 4 + 8;

// A checkpoint file opened for reading, and its size on disk.
struct OpenedFile {
  std::ifstream in;
  size_t size = 0;
};

OpenedFile open_file(const std::string& path) {
  OpenedFile f{std::ifstream(path, std::ios::binary), 0};
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (!f.in || error) {
    TANDEM_THROW(IoError, "cannot open checkpoint '", path, "'",
                 error ? ": " + error.message() : "");
  }
  f.size = static_cast<size_t>(size);
  return f;
}

// The next `size` bytes of the file.
std::string read_bytes(OpenedFile& f, size_t size, const std::string& path) {
  std::string bytes(size, '\0');
  if (!f.in.read(bytes.data(), static_cast<std::streamsize>(size))) {
    TANDEM_THROW(IoError, "cannot read checkpoint '", path, "': got ", f.in.gcount(), " of ", size,
                 " bytes");
  }
  return bytes;
}

// Checks the magic and version at the start of `bytes`, a file of
// `file_size` bytes (bytes holds at least kFixed of them when it is long
// enough to be a checkpoint).
void check_prefix(const std::string& bytes, size_t file_size, const std::string& path) {
  if (file_size < kFixed + 4 || bytes.size() < kFixed ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    TANDEM_THROW(IoError, "'", path, "' is not a tandem checkpoint (bad magic or too short)");
  }
  const auto version = read_pod<uint32_t>(bytes, sizeof(kMagic));
  if (version != kVersion) {
    TANDEM_THROW(IoError, "checkpoint '", path, "' has format version ", version,
                 ", this build reads version ", kVersion);
  }
}

// The header length after the prefix, checked against the file's size.
uint64_t header_length(const std::string& bytes, size_t file_size, const std::string& path) {
  const auto header_bytes = read_pod<uint64_t>(bytes, sizeof(kMagic) + 4);
  if (header_bytes > file_size - kFixed - 4) {
    TANDEM_THROW(IoError, "checkpoint '", path, "' is corrupt (header length ", header_bytes,
                 ", but only ", file_size - kFixed - 4, " bytes follow it)");
  }
  return header_bytes;
}

// The tensor bytes of a checkpoint file held in memory.
struct DataRegion {
  const char* bytes;
  size_t size;
};

// One tensor of the header. Its offset, length, shape and dtype are checked
// against each other and against the data region before it is allocated, and
// tensors may not overlap (each starts at or after end_of_previous), so the
// tensors together never take more memory than the file holds.
Tensor read_tensor(const nlohmann::json& entry, const std::string& name, const DataRegion& region,
                   size_t& end_of_previous, const std::string& path) {
  const auto offset = tandem::detail::json_integer<uint64_t>(entry.at("offset"), "'offset'");
  const auto length = tandem::detail::json_integer<uint64_t>(entry.at("bytes"), "'bytes'");
  std::vector<int64_t> dims;
  for (const nlohmann::json& d : entry.at("shape").get_ref<const nlohmann::json::array_t&>())
    dims.push_back(tandem::detail::json_integer<int64_t>(d, "a dimension"));
  Shape shape;
  DType dtype{};
  size_t expected = 0;
  try {
    shape = Shape(dims);
    dtype = parse_dtype(entry.at("dtype").get<std::string>());
    expected = Tensor::checked_nbytes(shape, dtype);
  } catch (const Error& e) {
    TANDEM_THROW(IoError, "checkpoint '", path, "': tensor '", name, "': ", e.what());
  }
  if (expected != length) {
    TANDEM_THROW(IoError, "checkpoint '", path, "': tensor '", name, "' claims ", length,
                 " bytes, its shape ", shape.to_string(), " and dtype ", dtype_name(dtype),
                 " need ", expected);
  }
  if (offset < end_of_previous || offset > region.size || length > region.size - offset) {
    TANDEM_THROW(IoError, "checkpoint '", path, "': tensor '", name, "' claims bytes [", offset,
                 ", ", offset, " + ", length, ") of the ", region.size,
                 "-byte data region, which lie outside it or overlap tensor bytes before them");
  }
  end_of_previous = static_cast<size_t>(offset + length);
  Tensor t = Tensor::empty(shape, dtype);
  if (length > 0) std::memcpy(t.raw_data(), region.bytes + offset, static_cast<size_t>(length));
  return t;
}

}  // namespace

CheckpointWriter::CheckpointWriter(std::string path, std::map<std::string, std::string> metadata)
    : file_(std::make_unique<AtomicFile>(path, "checkpoint")),
      path_(std::move(path)),
      metadata_(std::move(metadata)) {}

CheckpointWriter::~CheckpointWriter() = default;

void CheckpointWriter::write(std::string_view bytes) {
  file_->write(bytes);
  crc_ = crc_update(crc_, bytes.data(), bytes.size());
}

void CheckpointWriter::begin(const std::map<std::string, std::string>& metadata,
                             const std::vector<distribute::TensorLayout>& layout) {
  if (begun_) TANDEM_THROW(InvalidArgument, "checkpoint '", path_, "': begin() called twice");
  begun_ = true;
  for (const auto& [key, value] : metadata) metadata_.emplace(key, value);
  nlohmann::json header;
  header["metadata"] = metadata_;
  header["tensors"] = nlohmann::json::array();
  size_t offset = 0;
  for (const distribute::TensorLayout& t : layout) {
    const size_t bytes = static_cast<size_t>(t.shape.numel()) * dtype_size(t.dtype);
    header["tensors"].push_back({{"name", t.name},
                                 {"dtype", std::string(dtype_name(t.dtype))},
                                 {"shape", t.shape.to_vector()},
                                 {"offset", offset},
                                 {"bytes", bytes}});
    offset = align_up(offset + bytes);
  }
  layout_ = layout;
  const std::string header_text = header.dump();
  std::string start;
  start.append(kMagic, sizeof(kMagic));
  append_pod<uint32_t>(start, kVersion);
  append_pod<uint64_t>(start, header_text.size());
  start += header_text;
  start.resize(align_up(start.size()), '\0');
  write(start);
}

void CheckpointWriter::put(const std::string& name, const Tensor& tensor) {
  if (!begun_ || written_ >= layout_.size()) {
    TANDEM_THROW(InvalidArgument, "checkpoint '", path_, "': tensor '", name,
                 "' was not laid out by begin()");
  }
  const distribute::TensorLayout& expected = layout_[written_];
  if (name != expected.name || tensor.shape() != expected.shape ||
      tensor.dtype() != expected.dtype) {
    TANDEM_THROW(InvalidArgument, "checkpoint '", path_, "': tensor ", written_, " is '", name,
                 "' ", dtype_name(tensor.dtype()), " ", tensor.shape().to_string(),
                 " but was laid out as '", expected.name, "' ", dtype_name(expected.dtype), " ",
                 expected.shape.to_string());
  }
  const size_t bytes = tensor.nbytes();
  if (bytes > 0) {
    const Tensor host = tensor.on_host();
    write({static_cast<const char*>(host.raw_data()), bytes});
  }
  const size_t padding = align_up(bytes) - bytes;
  if (padding > 0) write(std::string(padding, '\0'));
  ++written_;
}

void CheckpointWriter::commit() {
  if (!begun_ || written_ != layout_.size()) {
    TANDEM_THROW(InvalidArgument, "checkpoint '", path_, "': ", written_, " of ", layout_.size(),
                 " tensors were written");
  }
  std::string crc;
  append_pod<uint32_t>(crc, crc_);
  file_->write(crc);
  file_->commit();
}

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
  CheckpointWriter writer(path);
  distribute::write_state(checkpoint, writer);
  writer.commit();
}

Checkpoint load_checkpoint(const std::string& path) {
  OpenedFile file = open_file(path);
  const std::string bytes = read_bytes(file, file.size, path);
  check_prefix(bytes, bytes.size(), path);
  const uint32_t stored_crc = read_pod<uint32_t>(bytes, bytes.size() - 4);
  if (crc_of(bytes.data(), bytes.size() - 4) != stored_crc) {
    TANDEM_THROW(IoError, "checkpoint '", path, "' is corrupt (checksum mismatch)");
  }
  const uint64_t header_bytes = header_length(bytes, bytes.size(), path);
  Checkpoint checkpoint;
  try {
    const nlohmann::json header = nlohmann::json::parse(bytes.substr(kFixed, header_bytes));
    checkpoint.metadata = header.at("metadata").get<std::map<std::string, std::string>>();
    // The tensor bytes lie between the padded header and the CRC.
    const size_t data_start = std::min(align_up(kFixed + header_bytes), bytes.size() - 4);
    const DataRegion region{.bytes = bytes.data() + data_start,
                            .size = bytes.size() - 4 - data_start};
    size_t end_of_previous = 0;
    for (const auto& entry : header.at("tensors")) {
      const auto name = entry.at("name").get<std::string>();
      checkpoint.tensors.emplace_back(name,
                                      read_tensor(entry, name, region, end_of_previous, path));
    }
  } catch (const nlohmann::json::exception& e) {
    TANDEM_THROW(IoError, "checkpoint '", path, "' has a malformed header: ", e.what());
  }
  return checkpoint;
}

std::map<std::string, std::string> read_checkpoint_metadata(const std::string& path) {
  OpenedFile file = open_file(path);
  const std::string prefix = read_bytes(file, std::min(file.size, kFixed), path);
  check_prefix(prefix, file.size, path);
  const std::string header = read_bytes(file, header_length(prefix, file.size, path), path);
  try {
    return nlohmann::json::parse(header).at("metadata").get<std::map<std::string, std::string>>();
  } catch (const nlohmann::json::exception& e) {
    TANDEM_THROW(IoError, "checkpoint '", path, "' has a malformed header: ", e.what());
  }
}

}  // namespace tandem::train
