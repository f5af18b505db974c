#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "support/test_files.h"
#include "tandem/base/error.h"
#include "tandem/data/batching.h"
#include "tandem/data/fashion_mnist.h"
#include "tandem/data/idx.h"
#include "tandem/data/text_corpus.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::write_bytes;
using testing::write_gz;

std::string temp_path(const std::string& name) {
  fs::create_directories(TANDEM_TEST_TMPDIR);
  return (fs::path(TANDEM_TEST_TMPDIR) / name).string();
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string error_of(const std::string& path) {
  try {
    data::read_idx(path);
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

TEST(Idx, RoundTripsRawAndGzipForEachType) {
  const Tensor u8 =
      Tensor::from_floats(Shape{2, 3}, std::vector<float>{0, 1, 2, 253, 254, 255}, DType::u8);
  const Tensor i32 = Tensor::from_ints(Shape{4}, std::vector<int32_t>{-7, 0, 1 << 20, 42});
  const Tensor f32 =
      Tensor::from_floats(Shape{1, 2, 2}, std::vector<float>{1.5f, -2.0f, 1e-30f, 3e30f});
  for (const Tensor& t : {u8, i32, f32}) {
    const std::string raw = temp_path("roundtrip.idx");
    data::write_idx(raw, t);
    const Tensor back = data::read_idx(raw);
    EXPECT_EQ(back.shape(), t.shape());
    EXPECT_EQ(back.dtype(), t.dtype());
    EXPECT_EQ(back.to_floats(), t.to_floats());
    const std::string gz = temp_path("roundtrip.idx.gz");
    write_gz(gz, read_bytes(raw));
    EXPECT_EQ(data::read_idx(gz).to_floats(), t.to_floats());
  }
}

TEST(Idx, TruncatedFilesAreReportedWithTheirName) {
  const Tensor t = Tensor::full(Shape{10, 10}, 7.0f, DType::u8);
  const std::string raw = temp_path("full.idx");
  data::write_idx(raw, t);
  const std::string bytes = read_bytes(raw);
  const std::string cut = temp_path("cut.idx");
  write_bytes(cut, bytes.substr(0, bytes.size() - 5));
  std::string message = error_of(cut);
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
  EXPECT_NE(message.find("cut.idx"), std::string::npos) << message;
  write_bytes(cut, bytes.substr(0, 6));
  EXPECT_NE(error_of(cut).find("truncated"), std::string::npos);
  // A gzip stream cut in the middle.
  const std::string gz = temp_path("cut.idx.gz");
  write_gz(gz, bytes);
  const std::string gz_bytes = read_bytes(gz);
  write_bytes(gz, gz_bytes.substr(0, gz_bytes.size() / 2));
  EXPECT_FALSE(error_of(gz).empty());
}

TEST(Idx, MalformedHeadersAndTrailingBytes) {
  const std::string path = temp_path("bad.idx");
  write_bytes(path, std::string("\x12\x34\x08\x01\x00\x00\x00\x01\x05", 9));
  EXPECT_NE(error_of(path).find("not an IDX file"), std::string::npos);
  write_bytes(path, std::string("\x00\x00\x07\x01\x00\x00\x00\x01\x05", 9));
  EXPECT_NE(error_of(path).find("unknown element type"), std::string::npos);
  write_bytes(path, std::string("\x00\x00\x08\x00", 4));
  EXPECT_NE(error_of(path).find("dimensions"), std::string::npos);
  write_bytes(path, std::string("\x00\x00\x08\x01\x00\x00\x00\x01\x05\x06", 10));
  EXPECT_NE(error_of(path).find("beyond"), std::string::npos);
  EXPECT_NE(error_of(temp_path("does-not-exist.idx")).find("cannot open"), std::string::npos);
}

TEST(FashionMnist, LoadsTheDebianPackageNormalised) {
  ASSERT_TRUE(fs::is_directory(TANDEM_FASHION_MNIST_DIR))
      << "install Debian's dataset-fashion-mnist (scripts/install-deps.sh)";
  const data::FashionMnist d = data::load_fashion_mnist(TANDEM_FASHION_MNIST_DIR);
  EXPECT_EQ(d.train.images.shape(), (Shape{60000, 28, 28, 1}));
  EXPECT_EQ(d.test.images.shape(), (Shape{10000, 28, 28, 1}));
  EXPECT_EQ(d.train.labels.dtype(), DType::i32);
  const std::vector<float> x = d.train.images.slice(0, 5000).to_floats();
  double mean = std::accumulate(x.begin(), x.end(), 0.0) / x.size(), var = 0;
  for (float v : x) var += (v - mean) * (v - mean) / x.size();
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(var), 1.0, 0.02);
  std::vector<int64_t> counts(10, 0);
  for (int32_t l : d.test.labels.to_ints()) counts.at(l)++;
  for (int64_t c : counts) EXPECT_EQ(c, 1000);
}

TEST(FashionMnist, MissingDirectoryOrFilesAreNamed) {
  try {
    data::load_fashion_mnist("/nonexistent/fashion");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/fashion"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("dataset-fashion-mnist"), std::string::npos);
  }
  // A name the OS refuses is the same error, not a std::filesystem exception.
  EXPECT_THROW(data::load_fashion_mnist("/tmp/" + std::string(300, 'K')), IoError);
  const std::string dir = temp_path("empty-fashion");
  fs::create_directories(dir);
  try {
    data::load_fashion_mnist(dir);
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("train-images-idx3-ubyte"), std::string::npos) << e.what();
  }
}

TEST(FashionMnist, InconsistentCountsAndBadLabelsAreErrors) {
  const std::string dir = temp_path("tiny-fashion");
  fs::create_directories(dir);
  auto write_split = [&](const std::string& prefix, int64_t images, std::vector<float> labels) {
    data::write_idx(dir + "/" + prefix + "-images-idx3-ubyte",
                    Tensor::zeros(Shape{images, 28, 28}, DType::u8));
    data::write_idx(
        dir + "/" + prefix + "-labels-idx1-ubyte",
        Tensor::from_floats(Shape{static_cast<int64_t>(labels.size())}, labels, DType::u8));
  };
  write_split("train", 3, {1, 2, 3});
  write_split("t10k", 2, {0, 9});
  EXPECT_EQ(data::load_fashion_mnist(dir).train.size(), 3);
  write_split("t10k", 3, {0, 9});
  EXPECT_THROW(data::load_fashion_mnist(dir), IoError);
  write_split("t10k", 2, {0, 12});
  try {
    data::load_fashion_mnist(dir);
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("label 12"), std::string::npos) << e.what();
  }
}

TEST(TextCorpus, AnEarlierCorpussShardsAreReplaced) {
  // Written again with fewer shards, the old ones stayed and the
  // specification's glob read both (the data twice over).
  const fs::path dir = fs::path(TANDEM_TEST_TMPDIR) / "text_corpus_again";
  fs::remove_all(dir);
  std::string text;
  for (int i = 0; i < 200; ++i) text += "In the beginning God created the heaven and the earth.\n";
  const auto shards = [&] {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".tfrecord") names.push_back(entry.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  };
  data::write_text_corpus(text, dir.string(), {.context = 16, .records_per_shard = 50});
  EXPECT_GT(shards().size(), 10u);
  const data::TextCorpusSummary again =
      data::write_text_corpus(text, dir.string(), {.context = 16});
  EXPECT_EQ(shards(), (std::vector<std::string>{"train-00000-of-00001.tfrecord",
                                                "validation-00000-of-00001.tfrecord"}));
  EXPECT_EQ(again.files.front(), "train-00000-of-00001.tfrecord");
}

TEST(Batching, PermutationIsDeterministicPerEpochAndComplete) {
  const auto a = data::epoch_permutation(1000, 5, 0);
  EXPECT_EQ(a, data::epoch_permutation(1000, 5, 0));
  EXPECT_NE(a, data::epoch_permutation(1000, 5, 1));
  EXPECT_NE(a, data::epoch_permutation(1000, 6, 0));
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  const Tensor src = Tensor::from_ints(Shape{4, 2}, std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  const std::vector<int64_t> rows = {3, 0, 3};
  EXPECT_EQ(data::gather_rows(src, rows).to_ints(), (std::vector<int32_t>{6, 7, 0, 1, 6, 7}));
  const std::vector<int64_t> bad = {4};
  EXPECT_THROW(data::gather_rows(src, bad), InvalidArgument);
}

}  // namespace
}  // namespace tandem
