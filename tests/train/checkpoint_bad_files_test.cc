// Checkpoints whose header claims more than the file holds (lengths up to
// 2^62, shapes past int64, offsets past the end, overlapping tensors), with a
// valid CRC so that the claims themselves are what is checked: each is an
// IoError naming the file and tensor, raised quickly and without allocating
// the claimed size.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "support/errors.h"
#include "support/peak_rss.h"
#include "tandem/base/error.h"
#include "tandem/train/checkpoint.h"

namespace tandem::train {
namespace {

using testing::expect_contains;

namespace fs = std::filesystem;
using testing::rejected_cheaply;

template <typename T>
void append(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// A checkpoint as save_checkpoint lays it out: "TNDMCKPT", u32 version 1,
// u64 header length (`header_length`, normally header.size()), the JSON
// header, zero padding to 64 bytes, the tensor bytes, the CRC-32 of all that.
std::string checkpoint_bytes(const std::string& header, uint64_t header_length,
                             const std::string& data) {
  std::string out = "TNDMCKPT";
  append<uint32_t>(out, 1);
  append<uint64_t>(out, header_length);
  out += header;
  out.resize((out.size() + 63) / 64 * 64, '\0');
  out += data;
  append<uint32_t>(
      out, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(out.data()), out.size())));
  return out;
}

// A header listing tensors given as JSON objects ("{...},{...}").
std::string header_with(const std::string& tensors) {
  return R"({"metadata":{"step":"1"},"tensors":[)" + tensors + "]}";
}

std::string tensor_json(const std::string& name, const std::string& shape,
                        const std::string& offset, const std::string& bytes,
                        const std::string& dtype = "u8") {
  return R"({"name":")" + name + R"(","dtype":")" + dtype + R"(","shape":)" + shape +
         R"(,"offset":)" + offset + R"(,"bytes":)" + bytes + "}";
}

std::string write_checkpoint(const std::string& bytes) {
  // Named after the test: CTest runs tests in parallel.
  const fs::path dir =
      fs::path(TANDEM_TEST_TMPDIR) /
      ("checkpoint_bad_files_" +
       std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
  fs::create_directories(dir);
  const std::string path = (dir / "claims.tckpt").string();
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::string load_error(const std::string& tensors, const std::string& data = std::string(64, 1)) {
  const std::string header = header_with(tensors);
  const std::string path = write_checkpoint(checkpoint_bytes(header, header.size(), data));
  return rejected_cheaply<IoError>([&] { load_checkpoint(path); });
}

TEST(CheckpointBadFiles, TheHandWrittenLayoutLoads) {
  const std::string header = header_with(tensor_json("w", "[4,4]", "0", "64", "f32"));
  std::string data(64, '\0');
  const float one = 1.0f;
  std::memcpy(data.data(), &one, 4);
  const Checkpoint c =
      load_checkpoint(write_checkpoint(checkpoint_bytes(header, header.size(), data)));
  ASSERT_EQ(c.tensors.size(), 1u);
  EXPECT_EQ(c.tensors[0].second.shape(), (Shape{4, 4}));
  EXPECT_EQ(c.tensors[0].second.to_floats()[0], 1.0f);
  EXPECT_EQ(c.metadata.at("step"), "1");
}

TEST(CheckpointBadFiles, HeaderLengthsBeyondTheFileAreRefused) {
  const std::string header = header_with("");
  for (const uint64_t length : {uint64_t{1} << 62, ~uint64_t{0}, uint64_t{header.size() + 200}}) {
    const std::string path = write_checkpoint(checkpoint_bytes(header, length, ""));
    const std::string message = rejected_cheaply<IoError>([&] { load_checkpoint(path); });
    expect_contains(message, "claims.tckpt' is corrupt (header length " + std::to_string(length));
    // The metadata reader (the header alone) checks the same before allocating.
    expect_contains(rejected_cheaply<IoError>([&] { read_checkpoint_metadata(path); }),
                    "claims.tckpt' is corrupt (header length " + std::to_string(length));
  }
}

// The metadata alone, from the header: what load_checkpoint gives, without
// the tensors; a file that is not a checkpoint is refused alike.
TEST(CheckpointBadFiles, MetadataIsReadFromTheHeaderAlone) {
  const std::string header = header_with(tensor_json("w", "[4,4]", "0", "64", "f32"));
  const std::string path =
      write_checkpoint(checkpoint_bytes(header, header.size(), std::string(64, '\0')));
  EXPECT_EQ(read_checkpoint_metadata(path), load_checkpoint(path).metadata);
  EXPECT_EQ(read_checkpoint_metadata(path).at("step"), "1");
  const std::string junk = write_checkpoint("not a checkpoint");
  expect_contains(rejected_cheaply<IoError>([&] { read_checkpoint_metadata(junk); }),
                  "is not a tandem checkpoint");
  expect_contains(rejected_cheaply<IoError>([&] { read_checkpoint_metadata(junk + ".none"); }),
                  "cannot open checkpoint");
}

TEST(CheckpointBadFiles, TensorSizesBeyondTheFileAreRefusedBeforeAllocating) {
  // Consistent shape and length, but far more than the 64 data bytes.
  std::string message =
      load_error(tensor_json("big", "[2147483648,2147483648]", "0", "4611686018427387904"));
  expect_contains(message,
                  "tensor 'big' claims bytes [0, 0 + 4611686018427387904) of the "
                  "64-byte data region");
  message = load_error(tensor_json("w", "[4000,1000,1000]", "0", "4000000000"));
  expect_contains(message, "claims bytes [0, 0 + 4000000000)");
  // One byte past the end, and offsets that would wrap around.
  expect_contains(load_error(tensor_json("w", "[16]", "1", "64", "f32")),
                  "claims bytes [1, 1 + 64) of the 64-byte data region");
  expect_contains(load_error(tensor_json("w", "[16]", "18446744073709551615", "64", "f32")),
                  "outside it");
  // A negative offset is not an offset (it used to wrap to 2^64 - 1).
  expect_contains(load_error(tensor_json("w", "[16]", "-1", "64", "f32")),
                  "'offset' is -1, not an integer in [0, 18446744073709551615]");
  expect_contains(load_error(tensor_json("w", "[16]", "1.5", "64", "f32")), "not an integer");
  // Two tensors over the same bytes.
  expect_contains(
      load_error(tensor_json("a", "[64]", "0", "64") + "," + tensor_json("b", "[64]", "0", "64")),
      "tensor 'b' claims bytes [0, 0 + 64)");
}

TEST(CheckpointBadFiles, ShapesPastInt64AndInconsistentSizesAreRefused) {
  std::string message = load_error(tensor_json("w", "[1099511627776,1099511627776]", "0", "0"));
  expect_contains(message, "tensor 'w': shape 1099511627776 x 1099511627776 has more than");
  message = load_error(tensor_json("w", "[2305843009213693952]", "0", "0", "f32"));
  expect_contains(message, "tensor 'w': a f32 tensor of shape (2305843009213693952,) would need");
  expect_contains(load_error(tensor_json("w", "[-1]", "0", "0")), "negative dimension -1");
  expect_contains(load_error(tensor_json("w", "[16]", "0", "60", "f32")),
                  "tensor 'w' claims 60 bytes, its shape (16,) and dtype f32 need 64");
  expect_contains(load_error(tensor_json("w", "[16]", "0", "64", "f64")), "tensor 'w': ");
  expect_contains(load_error(tensor_json("w", "[1,1,1,1,1,1,1,1,1]", "0", "1")),
                  "exceeds the maximum rank");
}

}  // namespace
}  // namespace tandem::train
