#include "tandem/interop/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>

#include "tandem/base/atomic_file.h"
#include "tandem/base/error.h"
#include "tandem/interop/detail/safetensors_header.h"

namespace tandem::interop {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors bytes are little-endian; this reader copies them as they are");

// The reference implementation refuses larger headers; so does this one, so
// that a corrupt length cannot make it allocate the file's size for JSON.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeName {
  const char* name;
  size_t size;
};
// Every dtype of the format (safetensors 0.4); tandem reads the ones it has.
constexpr DTypeName kDTypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8},
};

std::optional<DType> tandem_dtype(const std::string& name) {
  if (name == "F32") return DType::f32;
  if (name == "BF16") return DType::bf16;
  if (name == "F16") return DType::f16;
  if (name == "I32") return DType::i32;
  if (name == "U8") return DType::u8;
  if (name == "I64") return DType::i64;
  return std::nullopt;
}

// The byte count of a shape of this dtype, or nullopt when it overflows.
std::optional<uint64_t> byte_count(const std::vector<int64_t>& shape, size_t element_size) {
  uint64_t bytes = element_size;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) return std::nullopt;
  }
  return bytes;
}

void check_entry(const SafetensorsEntry& e, const std::string& path) {
  const size_t element_size = safetensors_dtype_size(e.dtype);
  if (element_size == 0)
    TANDEM_THROW(IoError, "'", path, "': tensor '", e.name, "' has an unknown dtype '", e.dtype,
                 "'");
  for (int64_t d : e.shape) {
    if (d < 0) {
      TANDEM_THROW(IoError, "'", path, "': tensor '", e.name, "' has a negative dimension ", d);
    }
  }
  const std::optional<uint64_t> bytes = byte_count(e.shape, element_size);
  if (!bytes) {
    TANDEM_THROW(IoError, "'", path, "': tensor '", e.name,
                 "' has a shape whose byte count overflows");
  }
  if (e.end < e.begin || e.end - e.begin != *bytes) {
    TANDEM_THROW(IoError, "'", path, "': tensor '", e.name, "' claims bytes [", e.begin, ", ",
                 e.end, "), its shape and dtype ", e.dtype, " need ", *bytes);
  }
}

}  // namespace

size_t safetensors_dtype_size(const std::string& name) {
  for (const DTypeName& d : kDTypes)
    if (name == d.name) return d.size;
  return 0;
}

std::string safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::i32:
      return "I32";
    case DType::u8:
      return "U8";
    case DType::i64:
      return "I64";
  }
  TANDEM_THROW(InvalidArgument, "no safetensors dtype for ", dtype_name(dtype));
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path_, error);
  if (error) TANDEM_THROW(IoError, "cannot open safetensors file '", path_, "': ", error.message());
  std::ifstream in(path_, std::ios::binary);
  if (!in) TANDEM_THROW(IoError, "cannot open safetensors file '", path_, "'");
  uint64_t header_bytes = 0;
  if (size < sizeof(header_bytes) ||
      !in.read(reinterpret_cast<char*>(&header_bytes), sizeof(header_bytes))) {
    TANDEM_THROW(IoError, "'", path_, "' is not a safetensors file: ", size,
                 " bytes, shorter than its 8-byte header length");
  }
  if (header_bytes > size - sizeof(header_bytes) || header_bytes > kMaxHeaderBytes) {
    TANDEM_THROW(IoError, "'", path_, "' is not a safetensors file or is truncated: its header ",
                 "claims ", header_bytes, " bytes, the file holds ", size - sizeof(header_bytes),
                 " after the length (and headers are at most ", kMaxHeaderBytes, ")");
  }
  std::string text(header_bytes, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(header_bytes)))
    TANDEM_THROW(IoError, "cannot read the header of '", path_, "'");
  data_start_ = sizeof(header_bytes) + header_bytes;
  const uint64_t data_bytes = size - data_start_;

  detail::SafetensorsHeader header = detail::parse_safetensors_header(text, path_);
  entries_ = std::move(header.entries);
  metadata_ = std::move(header.metadata);
  for (const SafetensorsEntry& e : entries_) check_entry(e, path_);
  std::sort(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Packed: each tensor starts where the one before it ends, the last ends
  // with the file (no overlap, no hidden bytes between or after tensors).
  uint64_t expected_begin = 0;
  for (const SafetensorsEntry& e : entries_) {
    if (e.begin != expected_begin) {
      TANDEM_THROW(IoError, "'", path_, "': tensor '", e.name, "' starts at byte ", e.begin,
                   " of the data region, where ", expected_begin,
                   e.begin < expected_begin ? " was expected (it overlaps the tensor before it)"
                                            : " was expected (a hole before it)");
    }
    expected_begin = e.end;
  }
  if (expected_begin != data_bytes) {
    TANDEM_THROW(IoError, "'", path_, "': its tensors cover ", expected_begin,
                 " bytes of a data region of ", data_bytes,
                 expected_begin > data_bytes ? " (the file is truncated)" : " (bytes left over)");
  }
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  for (const SafetensorsEntry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

Tensor SafetensorsFile::read(const SafetensorsEntry& entry) const {
  const std::optional<DType> dtype = tandem_dtype(entry.dtype);
  if (!dtype) {
    TANDEM_THROW(InvalidArgument, "'", path_, "': tensor '", entry.name, "' is ", entry.dtype,
                 ", which tandem has no dtype for (it reads F32, BF16, F16, I32, U8 and I64)");
  }
  Shape shape;
  try {
    shape = Shape(entry.shape);
  } catch (const Error& e) {
    TANDEM_THROW(InvalidArgument, "'", path_, "': tensor '", entry.name, "': ", e.what());
  }
  Tensor t = Tensor::empty(shape, *dtype);
  if (t.nbytes() == 0) return t;
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_start_ + entry.begin));
  if (!in || !in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes())))
    TANDEM_THROW(IoError, "'", path_, "': cannot read tensor '", entry.name, "' (file changed?)");
  return t;
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[detail::kSafetensorsMetadataKey] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == detail::kSafetensorsMetadataKey)
      TANDEM_THROW(InvalidArgument, "safetensors: a tensor cannot be named '", name, "'");
    if (!names.insert(name).second)
      TANDEM_THROW(InvalidArgument, "safetensors: tensor '", name, "' given twice");
    if (t.device().kind != DeviceKind::cpu)
      TANDEM_THROW(InvalidArgument, "safetensors: tensor '", name, "' is not on the CPU");
    header[name] = {{"dtype", safetensors_dtype(t.dtype())},
                    {"shape", t.shape().to_vector()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  // Padded with spaces to 8 bytes, as the reference writer does, so that the
  // data region is aligned for readers that map the file.
  text.resize((text.size() + 7) / 8 * 8, ' ');
  const uint64_t length = text.size();
  std::vector<std::string_view> parts;
  parts.emplace_back(reinterpret_cast<const char*>(&length), sizeof(length));
  parts.emplace_back(text);
  std::vector<Tensor> host;  // GPU tensors' host copies, alive until written
  host.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    host.push_back(t.on_host());
    if (t.nbytes() > 0)
      parts.emplace_back(static_cast<const char*>(host.back().raw_data()), t.nbytes());
  }
  write_file_atomically(path, parts, "safetensors file");
}

}  // namespace tandem::interop
