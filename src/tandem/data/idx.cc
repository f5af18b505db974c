#include "tandem/data/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tandem/base/error.h"

namespace tandem::data {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose_r(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly `bytes` bytes or throws IoError explaining what went wrong.
void read_exact(gzFile file, void* out, size_t bytes, const std::string& path, const char* what) {
  auto* dst = static_cast<unsigned char*>(out);
  size_t done = 0;
  while (done < bytes) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(bytes - done, 1u << 30));
    const int got = gzread(file, dst + done, chunk);
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(file, &code);
      TANDEM_THROW(IoError, "IDX file '", path, "': read error in ", what, ": ", message);
    }
    if (got == 0) {
      TANDEM_THROW(IoError, "IDX file '", path, "' is truncated: ", what, " needs ", bytes,
                   " bytes but only ", done, " are present");
    }
    done += static_cast<size_t>(got);
  }
}

uint32_t big_endian_u32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct ElementType {
  size_t size;
  DType dtype;
};

ElementType element_type(unsigned char code, const std::string& path) {
  switch (code) {
    case 0x08:
      return {1, DType::u8};
    case 0x09:
      return {1, DType::i32};
    case 0x0B:
      return {2, DType::i32};
    case 0x0C:
      return {4, DType::i32};
    case 0x0D:
      return {4, DType::f32};
    case 0x0E:
      return {8, DType::f32};
    default:
      TANDEM_THROW(IoError, "IDX file '", path, "' has unknown element type 0x", std::hex,
                   static_cast<int>(code));
  }
}

// Converts big-endian elements of the file's type into the tensor's dtype.
void decode(const std::vector<unsigned char>& raw, unsigned char code, Tensor& out) {
  const int64_t n = out.numel();
  const unsigned char* p = raw.data();
  switch (code) {
    case 0x08:
      if (n > 0) std::memcpy(out.raw_data(), p, static_cast<size_t>(n));  // no data: null pointers
      break;
    case 0x09:
      for (int64_t i = 0; i < n; ++i) out.data<int32_t>()[i] = static_cast<int8_t>(p[i]);
      break;
    case 0x0B:
      for (int64_t i = 0; i < n; ++i) {
        out.data<int32_t>()[i] = static_cast<int16_t>((p[2 * i] << 8) | p[2 * i + 1]);
      }
      break;
    case 0x0C:
      for (int64_t i = 0; i < n; ++i)
        out.data<int32_t>()[i] = static_cast<int32_t>(big_endian_u32(p + 4 * i));
      break;
    case 0x0D:
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t bits = big_endian_u32(p + 4 * i);
        std::memcpy(out.data<float>() + i, &bits, 4);
      }
      break;
    case 0x0E:
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t bits =
            (uint64_t{big_endian_u32(p + 8 * i)} << 32) | big_endian_u32(p + 8 * i + 4);
        double value;
        std::memcpy(&value, &bits, 8);
        out.data<float>()[i] = static_cast<float>(value);
      }
      break;
  }
}

// "4000 x 1000 x 1000"
std::string dims_text(const std::vector<int64_t>& dims) {
  std::string text;
  for (size_t d = 0; d < dims.size(); ++d) text += (d > 0 ? " x " : "") + std::to_string(dims[d]);
  return text;
}

// The data bytes the header's dimensions claim; IoError when they exceed
// kMaxIdxBytes or their element count overflows, before anything is allocated.
uint64_t claimed_bytes(const std::vector<int64_t>& dims, size_t element_size,
                       const std::string& path) {
  // The product of the non-zero dimensions must fit a Shape even when
  // another dimension is 0.
  uint64_t nonzero = 1;
  bool overflow = false, empty = false;
  for (int64_t d : dims) {
    if (d == 0)
      empty = true;
    else
      overflow |= __builtin_mul_overflow(nonzero, static_cast<uint64_t>(d), &nonzero);
  }
  uint64_t bytes = 0;
  overflow |= nonzero > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  overflow |= __builtin_mul_overflow(empty ? 0 : nonzero, uint64_t{element_size}, &bytes);
  if (overflow || bytes > kMaxIdxBytes) {
    TANDEM_THROW(IoError, "IDX file '", path, "' declares ", dims_text(dims), " elements (",
                 overflow ? "a count past INT64_MAX" : std::to_string(bytes) + " bytes of data",
                 "), more than the ", kMaxIdxBytes, " bytes (kMaxIdxBytes) an IDX file may hold");
  }
  return bytes;
}

// Reads the `bytes` data bytes in chunks. Unless the file's size vouched
// for them (`present`), at most kUnverifiedReserve bytes are reserved up
// front and the buffer grows only as data arrives, so a gzipped file whose
// header claims more than its stream holds costs about what it does hold.
std::vector<unsigned char> read_data(gzFile file, uint64_t bytes, bool present,
                                     const std::vector<int64_t>& dims, const std::string& path) {
  constexpr uint64_t kUnverifiedReserve = uint64_t{64} << 20;
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  std::vector<unsigned char> raw;
  raw.reserve(static_cast<size_t>(present ? bytes : std::min(bytes, kUnverifiedReserve)));
  while (raw.size() < bytes) {
    const size_t done = raw.size();
    const auto chunk = static_cast<unsigned>(std::min<uint64_t>(bytes - done, kChunk));
    raw.resize(done + chunk);
    const int got = gzread(file, raw.data() + done, chunk);
    if (got < 0) {
      int code = 0;
      TANDEM_THROW(IoError, "IDX file '", path, "': read error in the data after ", done,
                   " bytes: ", gzerror(file, &code));
    }
    if (got == 0) {
      TANDEM_THROW(IoError, "IDX file '", path, "' is truncated: its header declares ",
                   dims_text(dims), " elements (", bytes, " bytes) but the data ends after ", done,
                   " bytes");
    }
    raw.resize(done + static_cast<size_t>(got));
  }
  return raw;
}

}  // namespace

Tensor read_idx(const std::string& path) {
  MemoryCategoryScope input_memory(MemoryCategory::input);
  errno = 0;
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) {
    TANDEM_THROW(IoError, "cannot open IDX file '", path,
                 "': ", errno ? std::strerror(errno) : "out of memory");
  }
  gzbuffer(file.get(), 1 << 20);
  unsigned char magic[4];
  read_exact(file.get(), magic, 4, path, "the magic number");
  if (magic[0] != 0 || magic[1] != 0) {
    TANDEM_THROW(IoError, "'", path, "' is not an IDX file: magic number starts with ",
                 static_cast<int>(magic[0]), " ", static_cast<int>(magic[1]), ", expected 0 0");
  }
  const ElementType type = element_type(magic[2], path);
  const int rank = magic[3];
  if (rank < 1 || rank > Shape::kMaxRank) {
    TANDEM_THROW(IoError, "IDX file '", path, "' declares ", rank, " dimensions (expected 1..",
                 Shape::kMaxRank, ")");
  }
  std::vector<unsigned char> header(static_cast<size_t>(rank) * 4);
  read_exact(file.get(), header.data(), header.size(), path, "the dimensions");
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) dims[d] = big_endian_u32(header.data() + 4 * d);
  const uint64_t bytes = claimed_bytes(dims, type.size, path);
  // A raw file's size bounds the claim before anything is allocated; a
  // gzipped one's is unknown, so read_data grows its buffer as data arrives.
  const bool raw_file = gzdirect(file.get()) == 1;
  std::error_code error;
  const uint64_t file_size = raw_file ? std::filesystem::file_size(path, error) : 0;
  if (raw_file && !error) {
    const uint64_t header_bytes = 4 + header.size();
    const uint64_t available = file_size > header_bytes ? file_size - header_bytes : 0;
    if (available < bytes) {
      TANDEM_THROW(IoError, "IDX file '", path, "' is truncated: its header declares ",
                   dims_text(dims), " elements (", bytes, " bytes) but only ", available,
                   " bytes follow the header");
    }
    if (available > bytes) {
      TANDEM_THROW(IoError, "IDX file '", path, "' has data beyond the ", dims_text(dims),
                   " elements its header declares (", available, " bytes follow the header, ",
                   bytes, " expected; corrupt header?)");
    }
  }
  const std::vector<unsigned char> raw =
      read_data(file.get(), bytes, raw_file && !error, dims, path);
  unsigned char extra;
  const int trailing = gzread(file.get(), &extra, 1);
  if (trailing != 0) {
    TANDEM_THROW(IoError, "IDX file '", path, "' has data beyond the ", dims_text(dims),
                 " elements its header declares (corrupt header?)");
  }
  Tensor out = Tensor::empty(Shape(dims), type.dtype);
  decode(raw, magic[2], out);
  return out;
}

void write_idx(const std::string& path, const Tensor& tensor) {
  unsigned char code;
  switch (tensor.dtype()) {
    case DType::u8:
      code = 0x08;
      break;
    case DType::i32:
      code = 0x0C;
      break;
    case DType::f32:
      code = 0x0D;
      break;
    default:
      TANDEM_THROW(InvalidArgument, "write_idx: unsupported dtype ", dtype_name(tensor.dtype()));
  }
  std::vector<unsigned char> bytes{0, 0, code, static_cast<unsigned char>(tensor.rank())};
  auto put_u32 = [&](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8)
      bytes.push_back(static_cast<unsigned char>(v >> shift));
  };
  for (int64_t d : tensor.shape().dims()) put_u32(static_cast<uint32_t>(d));
  const auto* p = static_cast<const unsigned char*>(tensor.raw_data());
  const size_t element = dtype_size(tensor.dtype());
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    if (element == 1) {
      bytes.push_back(p[i]);
    } else {
      uint32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      put_u32(v);
    }
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) TANDEM_THROW(IoError, "cannot write IDX file '", path, "'");
}

}  // namespace tandem::data
