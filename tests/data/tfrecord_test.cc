// TFRecord and tf.train.Example against real files written by TensorFlow
// (tests/testdata/tfrecord, a copy of shared/testdata/tfrecord; SOURCES.md there says where they
// come from), record by record against their .expected.json, plus corrupted and truncated copies.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tandem/base/error.h"
#include "tandem/data/crc32c.h"
#include "tandem/data/example.h"
#include "tandem/data/tfrecord.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

const std::string kDir = TANDEM_TESTDATA_DIR "/tfrecord";

std::string hex(std::string_view bytes, size_t limit = std::string::npos) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < limit; ++i) {
    out += digits[static_cast<unsigned char>(bytes[i]) >> 4];
    out += digits[static_cast<unsigned char>(bytes[i]) & 15];
  }
  return out;
}

std::vector<nlohmann::json> expected_records(const nlohmann::json& file) {
  return file.at("records");
}

void check_file(const std::string& name) {
  SCOPED_TRACE(name);
  std::ifstream in(kDir + "/" + name + ".expected.json");
  ASSERT_TRUE(in) << "missing expected file for " << name;
  const nlohmann::json expected = nlohmann::json::parse(in);
  const std::string path = kDir + "/" + name;
  const Compression compression = detect_compression(path);
  EXPECT_EQ(compression == Compression::gzip ? "GZIP" : "NONE",
            expected.at("compression").get<std::string>());
  TFRecordReader reader(path, compression);
  const std::vector<nlohmann::json> records = expected_records(expected);
  size_t index = 0;
  while (auto record = reader.next()) {
    ASSERT_LT(index, records.size());
    const nlohmann::json& want = records[index];
    EXPECT_EQ(record->size(), want.at("length").get<size_t>()) << "record " << index;
    const Example example = decode_example(*record);
    const auto& features = want.at("features");
    EXPECT_EQ(example.size(), features.size()) << "record " << index;
    for (const auto& [feature_name, feature] : example) {
      SCOPED_TRACE("record " + std::to_string(index) + " feature " + feature_name);
      ASSERT_TRUE(features.contains(feature_name));
      const auto& w = features.at(feature_name);
      EXPECT_EQ(feature_kind_name(feature.kind), w.at("type").get<std::string>());
      EXPECT_EQ(feature.count(), w.at("count").get<size_t>());
      if (feature.kind == Feature::Kind::int64_list) {
        EXPECT_EQ(feature.int64s, w.at("values").get<std::vector<int64_t>>());
      } else if (feature.kind == Feature::Kind::float_list) {
        const std::vector<double> values = w.at("values").get<std::vector<double>>();
        ASSERT_EQ(feature.floats.size(), values.size());
        for (size_t i = 0; i < values.size(); ++i)
          EXPECT_EQ(feature.floats[i], static_cast<float>(values[i]));
      } else if (feature.kind == Feature::Kind::bytes_list) {
        const auto& values = w.at("values");
        ASSERT_EQ(feature.bytes.size(), values.size());
        for (size_t i = 0; i < values.size(); ++i) {
          EXPECT_EQ(feature.bytes[i].size(), values[i].at("len").get<size_t>());
          if (values[i].contains("hex")) {
            EXPECT_EQ(hex(feature.bytes[i]), values[i].at("hex").get<std::string>());
          }
          if (values[i].contains("first8_hex")) {
            EXPECT_EQ(hex(feature.bytes[i], 8), values[i].at("first8_hex").get<std::string>());
          }
        }
      }
    }
    ++index;
  }
  EXPECT_EQ(index, expected.at("num_records").get<size_t>());
  EXPECT_EQ(reader.records_read(), static_cast<int64_t>(index));
}

TEST(TFRecord, Crc32cKnownAnswers) {
  // RFC 3720 test vectors.
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  const std::string ones(32, '\xff');
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  // Continuing a CRC equals computing it at once.
  EXPECT_EQ(crc32c("56789", 5, crc32c("1234", 4)), crc32c("123456789", 9));
}

TEST(TFRecord, ReadsTheTorchdataFile) {
  check_file("torchdata_example.tfrecord");
}
TEST(TFRecord, ReadsTheGzippedTaxiFileWithKindlessFeatures) {
  check_file("tfx_chicago_taxi_eval_shard0.tfrecord.gz");
}
TEST(TFRecord, ReadsTheCifarPngFile) {
  check_file("tfx_cifar10_test_png.tfrecord");
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string write_copy(const std::string& name, const std::string& bytes) {
  const std::string path = (fs::path(TANDEM_TEST_TMPDIR) / name).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::string error_reading(const std::string& path, Compression c = Compression::none) {
  try {
    TFRecordReader reader(path, c);
    while (reader.next()) {
    }
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

TEST(TFRecord, CorruptionAndTruncationNameFileAndRecord) {
  const std::string original = read_all(kDir + "/torchdata_example.tfrecord");
  // Record 0: 12-byte header + 108 bytes + 4; record 1 starts at 124.
  std::string bad_data = original;
  bad_data[124 + 12 + 20] ^= 0x01;
  std::string message = error_reading(write_copy("bad_data.tfrecord", bad_data));
  EXPECT_NE(message.find("record 1 has corrupt data"), std::string::npos) << message;
  EXPECT_NE(message.find("bad_data.tfrecord"), std::string::npos) << message;
  std::string bad_length = original;
  bad_length[124] ^= 0x04;
  message = error_reading(write_copy("bad_length.tfrecord", bad_length));
  EXPECT_NE(message.find("record 1 has a corrupt length"), std::string::npos) << message;
  message =
      error_reading(write_copy("truncated.tfrecord", original.substr(0, original.size() - 10)));
  EXPECT_NE(message.find("record 3 is truncated"), std::string::npos) << message;
  message = error_reading(write_copy("truncated_header.tfrecord", original.substr(0, 124 + 5)));
  EXPECT_NE(message.find("record 1 is truncated"), std::string::npos) << message;
  EXPECT_NE(error_reading("/nonexistent/file.tfrecord").find("cannot open"), std::string::npos);
}

TEST(TFRecord, WritesAndReadsEveryCompression) {
  const std::vector<std::string> records = {"", "a", std::string(100000, 'x'), "last"};
  for (Compression c : {Compression::none, Compression::gzip, Compression::zlib}) {
    const std::string path =
        (fs::path(TANDEM_TEST_TMPDIR) / ("roundtrip" + std::to_string(static_cast<int>(c))))
            .string();
    write_tfrecord(path, records, c);
    EXPECT_EQ(detect_compression(path), c);
    TFRecordReader reader(path, c);
    std::vector<std::string> back;
    while (auto r = reader.next()) back.push_back(*r);
    EXPECT_EQ(back, records);
  }
}

TEST(TFRecord, UncompressedFilesAreCountedFromTheirHeaders) {
  const std::vector<std::string> records = {"", "a", std::string(100000, 'x'), "last"};
  const std::string raw = (fs::path(TANDEM_TEST_TMPDIR) / "count.tfrecord").string();
  const std::string gz = (fs::path(TANDEM_TEST_TMPDIR) / "count.tfrecord.gz").string();
  write_tfrecord(raw, records);
  write_tfrecord(gz, records, Compression::gzip);
  EXPECT_EQ(count_tfrecord_records(raw), 4);
  EXPECT_EQ(count_tfrecord_records(gz), -1);
  EXPECT_EQ(Dataset::from_tfrecord({raw, raw}).cardinality(), 8);
  EXPECT_EQ(Dataset::from_tfrecord({raw, gz}).cardinality(), kUnknownCardinality);
  EXPECT_EQ(Dataset::from_tfrecord({raw}).batch(3).cardinality(), 2);
  // A truncated file is not counted (reading it reports where it breaks).
  const std::string cut = (fs::path(TANDEM_TEST_TMPDIR) / "count-cut.tfrecord").string();
  std::string bytes;
  {
    std::ifstream in(raw, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::ofstream(cut, std::ios::binary).write(bytes.data(), 12 + 1 + 4 + 12 + 50);
  EXPECT_EQ(count_tfrecord_records(cut), -1);
  EXPECT_EQ(count_tfrecord_records(raw + ".missing"), -1);
}

TEST(Example, ParsesBySpecAndReportsBadFeatures) {
  TFRecordReader reader(kDir + "/tfx_chicago_taxi_eval_shard0.tfrecord.gz", Compression::gzip);
  const std::string record = *reader.next();
  const std::vector<FeatureSpec> spec = {
      {.name = "fare", .dtype = DType::f32, .shape = Shape{}},
      {.name = "pickup_community_area", .dtype = DType::i32, .shape = Shape{1}},
      {.name = "payment_type", .dtype = DType::u8},
      {.name = "company",
       .dtype = DType::f32,
       .shape = Shape{},
       .default_value = std::vector<float>{-1}},
      {.name = "dropoff_census_tract", .dtype = DType::f32, .variable_length = true}};
  const Element e = parse_example(record, spec);
  EXPECT_FLOAT_EQ(e.at("fare").item(), 12.25f);
  EXPECT_EQ(e.at("pickup_community_area").to_ints(), std::vector<int32_t>{28});
  EXPECT_EQ(tensor_bytes(e.at("payment_type")), "Credit Card");
  EXPECT_FLOAT_EQ(e.at("company").item(), -1.0f);  // kind-less feature: the default
  EXPECT_EQ(e.at("dropoff_census_tract").shape(), Shape{1});
  auto error_of = [&](FeatureSpec s) {
    try {
      parse_example(record, {s});
    } catch (const InvalidArgument& ex) {
      return std::string(ex.what());
    }
    return std::string();
  };
  EXPECT_NE(
      error_of({.name = "missing", .dtype = DType::f32}).find("lacks required feature 'missing'"),
      std::string::npos);
  EXPECT_NE(error_of({.name = "fare", .dtype = DType::i32}).find("'fare' is float_list"),
            std::string::npos);
  EXPECT_NE(error_of({.name = "fare", .dtype = DType::f32, .shape = Shape{2}}).find("has 1 values"),
            std::string::npos);
  EXPECT_NE(error_of({.name = "dropoff_census_tract", .dtype = DType::i32, .shape = Shape{1}})
                .find("does not fit i32"),
            std::string::npos);
  EXPECT_NE(error_of({.name = "company", .dtype = DType::f32}).find("no value list"),
            std::string::npos);
  EXPECT_THROW(decode_example(std::string("\x0a\x05\x0a\x03", 4)), IoError);
}

TEST(Example, PipelineFromTFRecordFiles) {
  const Dataset d =
      Dataset::from_tfrecord(
          {kDir + "/torchdata_example.tfrecord", kDir + "/torchdata_example.tfrecord"})
          .map(example_parser({{.name = "x_int", .dtype = DType::i32, .variable_length = true}}));
  Iterator it = d.iterator();
  int count = 0;
  while (auto e = it.next()) {
    EXPECT_EQ(e->at("x_int").shape(), Shape{10});
    ++count;
  }
  EXPECT_EQ(count, 8);
  Iterator missing = Dataset::from_tfrecord({"/nonexistent.tfrecord"}).iterator();
  EXPECT_THROW(missing.next(), IoError);
}

}  // namespace
}  // namespace tandem::data
