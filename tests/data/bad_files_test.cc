// Files whose headers and lengths claim more than they hold (up to 2^62
// bytes, or just past what is there): every reader refuses them with an
// IoError naming the file and both sizes, quickly and without allocating the
// claimed size (the peak RSS rises by less than 100 MB).
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "support/errors.h"
#include "support/peak_rss.h"
#include "support/test_files.h"
#include "tandem/base/error.h"
#include "tandem/data/crc32c.h"
#include "tandem/data/csv.h"
#include "tandem/data/dataset.h"
#include "tandem/data/idx.h"
#include "tandem/data/image.h"
#include "tandem/data/tfrecord.h"

namespace tandem::data {
namespace {

using testing::expect_contains;

namespace fs = std::filesystem;
using testing::rejected_cheaply;
using testing::write_bytes;
using testing::write_gz;

std::string temp_path(const std::string& name) {
  // Named after the test too: CTest runs tests (of every layer) in parallel.
  const fs::path dir =
      fs::path(TANDEM_TEST_TMPDIR) /
      ("bad_files_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
  fs::create_directories(dir);
  return (dir / name).string();
}

std::string zlib_compressed(const std::string& bytes) {
  uLongf size = compressBound(bytes.size());
  std::string packed(size, '\0');
  EXPECT_EQ(compress(reinterpret_cast<Bytef*>(packed.data()), &size,
                     reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()),
            Z_OK);
  packed.resize(size);
  return packed;
}

// --- IDX ----------------------------------------------------------------

// An IDX header: magic 0 0 type rank, then big-endian u32 dimensions.
std::string idx_header(unsigned char type, const std::vector<uint32_t>& dims) {
  std::string out{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((d >> shift) & 0xFF);
  }
  return out;
}

std::string idx_error(const std::string& path) {
  return rejected_cheaply<IoError>([&] { read_idx(path); });
}

TEST(BadFiles, IdxClaimsBeyondTheFileAreRefusedBeforeAllocating) {
  const std::string path = temp_path("claims.idx");
  // 100 bytes whose header claims 4000 x 1000 x 1000 u8 elements (4 GB).
  std::string file = idx_header(0x08, {4000, 1000, 1000});
  file.resize(100, '\x07');
  write_bytes(path, file);
  std::string message = idx_error(path);
  expect_contains(message, "claims.idx' is truncated");
  expect_contains(message, "4000 x 1000 x 1000");
  expect_contains(message, "4000000000 bytes");
  expect_contains(message, "only 84 bytes follow the header");
  // The same claim gzipped: the stream ends long before.
  const std::string gz = temp_path("claims.idx.gz");
  write_gz(gz, file);
  message = idx_error(gz);
  expect_contains(message, "is truncated");
  expect_contains(message, "4000000000 bytes");
  expect_contains(message, "ends after 84 bytes");
  // kMaxIdxBytes exactly (a legal claim) over a short gzip stream.
  write_gz(gz, idx_header(0x08, {1u << 17, 1u << 17}) + std::string(1000, '\1'));
  expect_contains(idx_error(gz), "ends after 1000 bytes");
  // Claims up to 2^62 bytes and beyond int64, raw and gzipped.
  for (const std::vector<uint32_t>& dims : std::vector<std::vector<uint32_t>>{
           {1u << 31, 1u << 31},                  // 2^62 u8
           {1u << 20, 1u << 20, 1u << 20},        // 2^60 elements of 8-byte f64
           {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF},  // past int64
           {0, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}}) {
    for (const bool gzipped : {false, true}) {
      const std::string header =
          idx_header(dims.size() == 3 && dims[0] == 1u << 20 ? 0x0E : 0x08, dims);
      if (gzipped)
        write_gz(gz, header + "data");
      else
        write_bytes(path, header + "data");
      message = idx_error(gzipped ? gz : path);
      expect_contains(message, "kMaxIdxBytes");
    }
  }
}

TEST(BadFiles, IdxOneByteShortOrLongIsNamedWithBothSizes) {
  const std::string path = temp_path("short.idx");
  write_bytes(path, idx_header(0x0C, {5, 5}) + std::string(99, '\0'));  // i32: needs 100
  std::string message = idx_error(path);
  expect_contains(message, "100 bytes) but only 99 bytes follow the header");
  write_bytes(path, idx_header(0x0C, {5, 5}) + std::string(101, '\0'));
  message = idx_error(path);
  expect_contains(message, "data beyond");
  expect_contains(message, "101 bytes follow the header, 100 expected");
  const std::string gz = temp_path("short.idx.gz");
  write_gz(gz, idx_header(0x0C, {5, 5}) + std::string(99, '\0'));
  expect_contains(idx_error(gz), "(100 bytes) but the data ends after 99 bytes");
}

// --- TFRecord -----------------------------------------------------------

// A record header claiming `length` bytes, with a valid length CRC.
std::string record_header(uint64_t length) {
  std::string header(12, '\0');
  std::memcpy(header.data(), &length, 8);
  const uint32_t crc = masked_crc32c(header.data(), 8);
  std::memcpy(header.data() + 8, &crc, 4);
  return header;
}

std::string first_record_error(const std::string& path, Compression compression) {
  return rejected_cheaply<IoError>([&] {
    TFRecordReader reader(path, compression);
    while (reader.next()) {
    }
  });
}

TEST(BadFiles, TfrecordLengthsBeyondTheFileAreRefusedBeforeAllocating) {
  const std::string path = temp_path("claims.tfrecord");
  const std::string tail(50, 'x');
  // Up to kMaxRecordBytes, an uncompressed file's size decides at once.
  for (const uint64_t length : {kMaxRecordBytes, uint64_t{4'000'000'000}, uint64_t{51}}) {
    write_bytes(path, record_header(length) + tail);
    const std::string message = first_record_error(path, Compression::none);
    expect_contains(message,
                    "claims.tfrecord': record 0 is truncated: it claims " + std::to_string(length));
    expect_contains(message, "only 50 bytes are left");
  }
  // 47 bytes + 4 CRC bytes would fit 51: one byte past what is there.
  write_bytes(path, record_header(47) + tail);
  expect_contains(first_record_error(path, Compression::none), "claims 47 bytes (+4");
  // Above the cap: refused whatever the compression.
  for (const uint64_t length : {kMaxRecordBytes + 1, uint64_t{1} << 62, ~uint64_t{0}}) {
    write_bytes(path, record_header(length) + tail);
    expect_contains(first_record_error(path, Compression::none), "kMaxRecordBytes");
  }
  // Compressed streams: the buffer grows only as data arrives.
  const std::string gz = temp_path("claims.tfrecord.gz");
  const std::string zlib = temp_path("claims.tfrecord.zlib");
  for (const uint64_t length : {kMaxRecordBytes, uint64_t{4'000'000'000}, uint64_t{51}}) {
    const std::string bytes = record_header(length) + tail;
    write_gz(gz, bytes);
    write_bytes(zlib, zlib_compressed(bytes));
    for (const auto& [file, compression] :
         {std::pair{gz, Compression::gzip}, std::pair{zlib, Compression::zlib}}) {
      const std::string message = first_record_error(file, compression);
      expect_contains(message, "record 0 is truncated (50 of " + std::to_string(length + 4));
    }
    write_gz(gz, record_header(kMaxRecordBytes + 1) + tail);
    expect_contains(first_record_error(gz, Compression::gzip), "kMaxRecordBytes");
  }
}

// `bytes` deflated as a gzip (window_bits 31) or zlib (15) stream whose
// first `flushed` bytes end in a sync flush; returns the stream and the
// length of the part up to that flush.
std::pair<std::string, size_t> deflated_with_flush(const std::string& bytes, size_t flushed,
                                                   int window_bits) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY),
            Z_OK);
  std::string out(compressBound(bytes.size()) + 64, '\0');
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(flushed);
  EXPECT_EQ(deflate(&z, Z_SYNC_FLUSH), Z_OK);
  const size_t cut = out.size() - z.avail_out;
  z.avail_in = static_cast<uInt>(bytes.size() - flushed);
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  return {out, cut};
}

TEST(BadFiles, CompressedTfrecordsCutAfterAFlushAreTruncated) {
  // TensorFlow's writer flushes with Z_SYNC_FLUSH: a file cut there holds
  // whole records and read as a valid, shorter file.
  const std::string raw = temp_path("three.tfrecord");
  write_tfrecord(raw, {"first", "second", "third"}, Compression::none);
  std::ifstream in(raw, std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  const size_t first = 12 + 5 + 4;
  for (const auto& [compression, bits] :
       {std::pair{Compression::gzip, 31}, std::pair{Compression::zlib, 15}}) {
    const auto [stream, cut] = deflated_with_flush(bytes, first, bits);
    const std::string path = temp_path("cut.tfrecord");
    write_bytes(path, stream);
    TFRecordReader whole(path, compression);
    int records = 0;
    while (whole.next()) ++records;
    EXPECT_EQ(records, 3);
    write_bytes(path, stream.substr(0, cut));
    TFRecordReader reader(path, compression);
    EXPECT_EQ(reader.next(), "first");
    try {
      reader.next();
      ADD_FAILURE() << "a cut stream read to its end";
    } catch (const IoError& e) {
      expect_contains(e.what(), "cut.tfrecord' is truncated: its ");
    }
  }
}

// --- Cache files ----------------------------------------------------------

template <typename T>
void append(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// A cache file of one element with one feature, as the cache writes it:
// "TNDMCACH", u32 features, u32 name length, name, u8 dtype, u8 rank, i64
// dims, u64 bytes, data.
std::string cache_file(const std::vector<int64_t>& dims, uint64_t bytes, size_t data_bytes,
                       DType dtype = DType::u8, uint32_t features = 1, uint32_t name_length = 1) {
  std::string out = "TNDMCACH";
  append<uint32_t>(out, features);
  append<uint32_t>(out, name_length);
  out += "x";
  append<uint8_t>(out, static_cast<uint8_t>(dtype));
  append<uint8_t>(out, static_cast<uint8_t>(dims.size()));
  for (int64_t d : dims) append<int64_t>(out, d);
  append<uint64_t>(out, bytes);
  out += std::string(data_bytes, '\1');
  return out;
}

std::string cache_error(const std::string& path) {
  return rejected_cheaply<IoError>([&] {
    Iterator it = Dataset::range(3).cache(path).iterator();
    while (it.next()) {
    }
  });
}

TEST(BadFiles, CacheSizesBeyondTheFileAreRefusedBeforeAllocating) {
  const std::string path = temp_path("claims.cache");
  // A shape whose bytes the file does not hold: 2^62, 4 GB, one byte short.
  struct Case {
    std::vector<int64_t> dims;
    uint64_t bytes;
  };
  for (const Case& c : {Case{{int64_t{1} << 31, int64_t{1} << 31}, uint64_t{1} << 62},
                        Case{{4000, 1000, 1000}, 4'000'000'000}, Case{{101}, 101}}) {
    write_bytes(path, cache_file(c.dims, c.bytes, 100));
    const std::string message = cache_error(path);
    expect_contains(message, "claims.cache' is damaged (element 0, feature 0 'x': claims " +
                                 std::to_string(c.bytes) + " bytes of data, 100 bytes left");
  }
  // Shapes whose size overflows, negative dimensions, inconsistent counts.
  write_bytes(path, cache_file({int64_t{1} << 62, 4}, 0, 100));
  expect_contains(cache_error(path), "more than INT64_MAX");
  write_bytes(path, cache_file({int64_t{1} << 61}, 0, 100, DType::f32));
  expect_contains(cache_error(path), "more than INT64_MAX");
  write_bytes(path, cache_file({-1}, 0, 100));
  expect_contains(cache_error(path), "negative dimension -1");
  write_bytes(path, cache_file({10}, 40, 100));
  expect_contains(cache_error(path), "claims 40 bytes, its shape and dtype need 10");
  // Counts and name lengths beyond the file.
  write_bytes(path, cache_file({10}, 10, 10, DType::u8, 0xFFFFFFFF));
  expect_contains(cache_error(path), "claims 4294967295 features");
  write_bytes(path, cache_file({10}, 10, 10, DType::u8, 1, 0x7FFFFFFF));
  expect_contains(cache_error(path), "claims a name of 2147483647 bytes");
  // Trailing bytes that do not make an element.
  write_bytes(path, cache_file({10}, 10, 10) + "ab");
  expect_contains(cache_error(path), "element 1: truncated feature count, 2 bytes left");
}

// --- CSV ------------------------------------------------------------------

TEST(BadFiles, CsvRecordsAboveTheCapsAreRefused) {
  const std::string path = temp_path("long.csv");
  // One line just past kMaxCsvRecordBytes: read up to the cap, no further.
  write_bytes(path, "a,b\n1," + std::string(kMaxCsvRecordBytes - 1, '7') + "\n");
  std::string message = rejected_cheaply<IoError>([&] {
    CsvReader reader(path, ',');
    while (reader.next()) {
    }
  });
  expect_contains(message, "long.csv' line 2: the record is longer than 33554432 bytes");
  // An unclosed quote reads to the cap, not to the end of the file.
  write_bytes(path, "a,b\n1,\"" + std::string(kMaxCsvRecordBytes, '\n'));
  message = rejected_cheaply<IoError>([&] {
    for (auto it = from_csv(path).iterator(); it.next();) {
    }
  });
  expect_contains(message, "a quoted field is never closed?");
  // A record of nothing but delimiters.
  write_bytes(path, std::string(kMaxCsvFields, ','));
  message = rejected_cheaply<IoError>([&] { CsvReader(path, ',').next(); });
  expect_contains(message, "line 1: the record has more than 1048576 fields");
  // At the caps exactly, the record is read.
  write_bytes(path, std::string(kMaxCsvFields - 1, ','));
  EXPECT_EQ(CsvReader(path, ',').next()->size(), kMaxCsvFields);
}

// --- Images ---------------------------------------------------------------

void put_be(std::string& s, size_t at, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    s[at + i] = static_cast<char>((v >> (8 * (bytes - 1 - i))) & 0xFF);
}

// A 4 x 4 PNG whose IHDR claims width x height (with a valid CRC).
std::string png_claiming(uint32_t width, uint32_t height) {
  Tensor image = Tensor::zeros(Shape{4, 4, 3}, DType::u8);
  std::string png = tensor_bytes(encode_png(image));
  put_be(png, 16, width, 4);
  put_be(png, 20, height, 4);
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17);
  put_be(png, 29, static_cast<uint32_t>(crc), 4);
  return png;
}

// A 16 x 16 baseline JPEG whose frame header claims width x height.
std::string jpeg_claiming(uint16_t width, uint16_t height) {
  std::string jpeg = tensor_bytes(encode_jpeg(Tensor::zeros(Shape{16, 16, 3}, DType::u8)));
  const size_t sof = jpeg.find("\xFF\xC0");
  EXPECT_NE(sof, std::string::npos);
  put_be(jpeg, sof + 5, height, 2);
  put_be(jpeg, sof + 7, width, 2);
  return jpeg;
}

TEST(BadFiles, AnIdxFileWithNoElementsReadsAsAnEmptyTensor) {
  // (The fuzzer's UBSan finding: a copy from the data of an empty vector.)
  const std::string path = temp_path("empty-idx");
  write_idx(path, Tensor::zeros(Shape{0, 3}).to(DType::u8));
  const Tensor t = read_idx(path);
  EXPECT_EQ(t.shape(), (Shape{0, 3}));
}

TEST(BadFiles, ImageHeadersPastThePixelCapAreRefusedBeforeAllocating) {
  // PNG: libpng itself refuses sides above 10^6; below, the product is checked.
  EXPECT_FALSE(rejected_cheaply<IoError>([&] {
                 decode_image(bytes_tensor(png_claiming(0x7FFFFFFF, 0x7FFFFFFF)), 3);
               }).empty());
  for (const auto& sides : {std::pair<uint32_t, uint32_t>{1000000, 1000000},
                            {8192, 8193},
                            {67109, 1000},
                            {1000, 67109}}) {
    const uint32_t w = sides.first, h = sides.second;
    const std::string message =
        rejected_cheaply<IoError>([&] { decode_image(bytes_tensor(png_claiming(w, h)), 3); });
    expect_contains(message, "PNG image of " + std::to_string(w) + "x" + std::to_string(h));
    expect_contains(message, "kMaxImagePixels");
  }
  // At the cap, the pixel buffer is reserved, but a file that holds 4 rows
  // writes only what it holds before its data runs out.
  expect_contains(
      rejected_cheaply<IoError>([&] { decode_image(bytes_tensor(png_claiming(8192, 8192)), 3); }),
      "corrupt PNG data");
  // JPEG: libjpeg-turbo refuses sides above 65500; below, the source size is
  // checked, also when a scaled decode's output would fit the cap (a
  // progressive JPEG's coefficients follow the source size).
  for (const auto& sides : {std::pair<uint16_t, uint16_t>{65500, 65500}, {8192, 8193}}) {
    const uint16_t w = sides.first, h = sides.second;
    for (const DecodeOptions& options :
         {DecodeOptions{}, DecodeOptions{.min_height = 1, .min_width = 1}}) {
      const std::string message = rejected_cheaply<IoError>(
          [&] { decode_image(bytes_tensor(jpeg_claiming(w, h)), options); });
      expect_contains(message, "JPEG image of " + std::to_string(w) + "x" + std::to_string(h));
      expect_contains(message, "kMaxImagePixels");
    }
  }
}

TEST(BadFiles, AJpegWithABadHeaderLeavesTheDecoderUsable) {
  const Tensor good = encode_jpeg(Tensor::zeros(Shape{16, 16, 3}, DType::u8));
  for (const auto& [w, h] : {std::pair<uint16_t, uint16_t>{65535, 65535}, {0, 16}}) {
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h));
    EXPECT_THROW(decode_image(bytes_tensor(jpeg_claiming(w, h))), IoError);
    // TurboJPEG keeps the failed header's state unless the handle is renewed.
    EXPECT_EQ(decode_image(good).shape(), (Shape{16, 16, 3}));
  }
}

}  // namespace
}  // namespace tandem::data
