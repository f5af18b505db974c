#include "tandem/data/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
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
      std::memcpy(out.raw_data(), p, static_cast<size_t>(n));
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
  int64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    dims[d] = big_endian_u32(header.data() + 4 * d);
    if (dims[d] > 0 && count > std::numeric_limits<int64_t>::max() / 16 / dims[d]) {
      TANDEM_THROW(IoError, "IDX file '", path, "' declares an impossibly large size");
    }
    count *= dims[d];
  }
  std::vector<unsigned char> raw(static_cast<size_t>(count) * type.size);
  read_exact(file.get(), raw.data(), raw.size(), path, "the data");
  unsigned char extra;
  const int trailing = gzread(file.get(), &extra, 1);
  if (trailing != 0) {
    TANDEM_THROW(IoError, "IDX file '", path, "' has data beyond the ", count,
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
