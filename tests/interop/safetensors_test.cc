// safetensors files: written and read back, read from bytes laid out by hand
// from the format's description (not by tandem's writer), and refused when
// the header and the file disagree, before anything is allocated.
#include "tandem/interop/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/peak_rss.h"
#include "support/test_files.h"
#include "tandem/base/error.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  const fs::path dir = fs::path(TANDEM_TEST_TMPDIR) / "safetensors";
  fs::create_directories(dir);
  return (dir / name).string();
}

// The file the format describes: u64 header length, the header, the data.
std::string file_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::string floats(std::initializer_list<float> values) {
  std::string out(values.size() * 4, '\0');
  std::memcpy(out.data(), values.begin(), out.size());
  return out;
}

TEST(Safetensors, WritesWhatItReadsBackInEveryDType) {
  const std::string path = scratch("round_trip.safetensors");
  const Tensor a = Tensor::from_floats(Shape{2, 3}, std::vector<float>{1, -2, 3.5f, 4, 5, 6});
  const Tensor b = a.to(DType::bf16);
  const Tensor c = a.to(DType::f16);
  const Tensor ids = Tensor::from_ints(Shape{4}, std::vector<int32_t>{7, -1, 0, 1 << 30});
  const Tensor bytes = Tensor::zeros(Shape{3}, DType::u8);
  const Tensor empty = Tensor::empty(Shape{0, 5});
  const Tensor scalar = Tensor::from_floats(Shape{}, std::vector<float>{2.5f});
  interop::write_safetensors(path,
                             {{"a", a},
                              {"layer.b", b},
                              {"c", c},
                              {"ids", ids},
                              {"bytes", bytes},
                              {"empty", empty},
                              {"scalar", scalar}},
                             {{"format", "pt"}, {"note", "x"}});
  const interop::SafetensorsFile file(path);
  ASSERT_EQ(file.entries().size(), 7u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("note"), "x");
  EXPECT_EQ(file.find("layer.b")->dtype, "BF16");
  EXPECT_EQ(file.find("ids")->dtype, "I32");
  EXPECT_EQ(file.find("absent"), nullptr);
  for (const auto& [name, t] : std::vector<std::pair<std::string, Tensor>>{{"a", a},
                                                                           {"layer.b", b},
                                                                           {"c", c},
                                                                           {"ids", ids},
                                                                           {"bytes", bytes},
                                                                           {"empty", empty},
                                                                           {"scalar", scalar}}) {
    const Tensor back = file.read(*file.find(name));
    EXPECT_EQ(back.shape(), t.shape()) << name;
    EXPECT_EQ(back.dtype(), t.dtype()) << name;
    ASSERT_EQ(back.nbytes(), t.nbytes()) << name;
    if (t.nbytes() > 0) {
      EXPECT_EQ(std::memcmp(back.raw_data(), t.raw_data(), t.nbytes()), 0) << name;
    }
  }
  // The header is padded to 8 bytes, so the data region is aligned.
  uint64_t header = 0;
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(&header), 8);
  EXPECT_EQ(header % 8, 0u);
}

TEST(Safetensors, ReadsAFileLaidOutByHandFromTheFormat) {
  // Keys out of byte order, an I64 tensor as PyTorch writes them
  // (num_batches_tracked), an F64 one, metadata.
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},)"
                             R"("n":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
                             R"("d":{"dtype":"F64","shape":[1],"data_offsets":[24,32]},)"
                             R"("__metadata__":{"format":"pt"}})";
  std::string data(8, '\0');
  data[0] = 3;  // n = 3
  data[7] = 1;  // and 2^56: past float's 24 bits, read exactly
  data += floats({1.0f, 2.0f, -3.0f, 0.5f});
  data += std::string(8, '\0');
  const std::string path = scratch("by_hand.safetensors");
  testing::write_bytes(path, file_bytes(header, data));
  const interop::SafetensorsFile file(path);
  ASSERT_EQ(file.entries().size(), 3u);
  EXPECT_EQ(file.entries()[0].name, "n");  // in byte order
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.read(*file.find("w")).to_floats(), (std::vector<float>{1, 2, -3, 0.5f}));
  const Tensor n = file.read(*file.find("n"));
  ASSERT_EQ(n.dtype(), DType::i64);
  EXPECT_EQ(n.data<int64_t>()[0], (int64_t{1} << 56) + 3);
  try {
    file.read(*file.find("d"));
    ADD_FAILURE() << "an F64 tensor was read";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'d' is F64"), std::string::npos) << e.what();
  }
}

std::string error_reading(const std::string& bytes) {
  const std::string path = scratch("bad.safetensors");
  testing::write_bytes(path, bytes);
  try {
    interop::SafetensorsFile file(path);
  } catch (const IoError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Safetensors, RefusesHeadersTheFileDoesNotHold) {
  const std::string w = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string two = floats({1, 2});
  EXPECT_EQ(error_reading(file_bytes(w, two)), "no error");
  const auto expect = [](const std::string& error, const std::string& part) {
    EXPECT_NE(error.find(part), std::string::npos) << "expected '" << part << "' in: " << error;
  };
  expect(error_reading("abc"), "shorter than its 8-byte header length");
  // A header length past the end, and one of 2^62: refused before allocating.
  std::string huge = file_bytes(w, two);
  const uint64_t claim = uint64_t{1} << 62;
  std::memcpy(huge.data(), &claim, 8);
  const std::string path = scratch("huge_header.safetensors");
  testing::write_bytes(path, huge);
  expect(testing::rejected_cheaply<IoError>([&] { interop::SafetensorsFile file(path); }),
         "claims 4611686018427387904 bytes");
  // A data offset of 2^62 with a shape to match.
  testing::write_bytes(path, file_bytes(R"({"w":{"dtype":"U8","shape":[4611686018427387904],)"
                                        R"("data_offsets":[0,4611686018427387904]}})",
                                        two));
  expect(testing::rejected_cheaply<IoError>([&] { interop::SafetensorsFile file(path); }),
         "truncated");
  expect(error_reading(file_bytes(w, two).substr(0, 20)), "truncated");
  expect(error_reading(file_bytes("{not json", "")), "corrupt header");
  expect(error_reading(file_bytes("[1,2]", "")), "not a JSON object");
  expect(
      error_reading(file_bytes(R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", two)),
      "unknown dtype 'F33'");
  expect(
      error_reading(file_bytes(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", two)),
      "negative dimension");
  expect(
      error_reading(file_bytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", two)),
      "need 12");
  expect(error_reading(file_bytes(
             R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", two)),
         "overflows");
  expect(
      error_reading(file_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", two)),
      "claims bytes [8, 0)");
  expect(error_reading(
             file_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", two + "xx")),
         "bytes left over");
  expect(error_reading(
             file_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", floats({1}))),
         "truncated");
  expect(error_reading(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                  two)),
         "overlaps");
  expect(error_reading(file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                  R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                  two + floats({3}))),
         "a hole before it");
  expect(error_reading(file_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", two)),
         "data_offsets");
  expect(
      error_reading(file_bytes(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", two)),
      "not an integer");
  expect(
      error_reading(file_bytes(
          R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"k":1}})", two)),
      "corrupt header");
  expect(error_reading(file_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "")),
         "truncated");
  // The header's structure, checked as it is read.
  const auto header_error = [&](const std::string& header) {
    return error_reading(file_bytes(header, two));
  };
  expect(header_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"),
         "tensor 'w' is given twice");
  expect(header_error(R"({"w":{"shape":[2],"data_offsets":[0,8]}})"), "tensor 'w' has no 'dtype'");
  expect(header_error(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})"), "has no 'shape'");
  expect(header_error(R"({"w":{"dtype":"F32","shape":[2]}})"), "has no 'data_offsets'");
  expect(header_error(R"({"w":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})"),
         "gives 'dtype' twice");
  expect(header_error(R"({"w":{"dtype":5,"shape":[2],"data_offsets":[0,8]}})"),
         "'dtype' is not a string");
  expect(header_error(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})"),
         "'shape' is not a list");
  expect(header_error(R"({"w":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})"),
         "'shape' holds a list, not an integer");
  expect(header_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-1,8]}})"),
         "negative data offset");
  expect(header_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})"),
         "'data_offsets' is not a list of two offsets");
  expect(header_error(R"({"w":[1]})"), "tensor 'w' is not an object");
  expect(header_error(R"({"__metadata__":{},"__metadata__":{},)"
                      R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"),
         "'__metadata__' is given twice");
  std::string deep = R"({"w":{"dtype":"F32","shape":[)";
  for (int i = 0; i < 65; ++i) deep += i == 0 ? "1" : ",1";
  expect(header_error(deep + R"(],"data_offsets":[0,4]}})"), "more than 64 dimensions");
}

// Fields the format does not define are skipped whatever they hold, and the
// file reads as without them.
TEST(Safetensors, SkipsFieldsItDoesNotKnow) {
  std::string nested(100'000, '[');
  nested += std::string(100'000, ']');
  const std::string path = scratch("extra_fields.safetensors");
  testing::write_bytes(path, file_bytes(R"({"w":{"extra":)" + nested +
                                            R"(,"dtype":"F32","more":{"a":[1,{"b":"c"}]},)"
                                            R"("shape":[2],"data_offsets":[0,8],"last":null},)"
                                            R"("__metadata__":{"k":"v"}})",
                                        floats({1, 2})));
  const interop::SafetensorsFile file(path);
  ASSERT_EQ(file.entries().size(), 1u);
  EXPECT_EQ(file.entries()[0].name, "w");
  EXPECT_EQ(file.entries()[0].shape, std::vector<int64_t>{2});
  EXPECT_EQ(file.metadata().at("k"), "v");
  EXPECT_EQ(file.read(file.entries()[0]).to_floats(), (std::vector<float>{1, 2}));
}

TEST(Safetensors, WriterRefusesNamesThatCannotBeRead) {
  const Tensor t = Tensor::zeros(Shape{2});
  const std::string path = scratch("names.safetensors");
  EXPECT_THROW(interop::write_safetensors(path, {{"a", t}, {"a", t}}), InvalidArgument);
  EXPECT_THROW(interop::write_safetensors(path, {{"", t}}), InvalidArgument);
  EXPECT_THROW(interop::write_safetensors(path, {{"__metadata__", t}}), InvalidArgument);
  EXPECT_FALSE(fs::exists(path));
}

TEST(Safetensors, AMissingFileSaysSo) {
  try {
    interop::SafetensorsFile file(scratch("absent.safetensors"));
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open safetensors file"), std::string::npos);
  }
}

}  // namespace
}  // namespace tandem
