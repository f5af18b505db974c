#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "support/test_data.h"
#include "tandem/base/error.h"
#include "tandem/data/distribute.h"
#include "tandem/data/example.h"
#include "tandem/data/tfrecord.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

using testing::drain;

// Seven TFRecord files holding values 100 f + r for r < 3 + f.
std::vector<std::string> make_files() {
  std::vector<std::string> paths;
  for (int f = 0; f < 7; ++f) {
    std::vector<std::string> records;
    for (int r = 0; r < 3 + f; ++r) records.push_back(std::to_string(100 * f + r));
    const std::string path =
        (fs::path(TANDEM_TEST_TMPDIR) / ("shard" + std::to_string(f) + ".tfrecord")).string();
    write_tfrecord(path, records);
    paths.push_back(path);
  }
  return paths;
}

Element record_to_int(Element e) {
  Tensor t = Tensor::empty(Shape{}, DType::i32);
  t.data<int32_t>()[0] = std::stoi(tensor_bytes(e.at("record")));
  return Element{{"value", t}};
}

TEST(AutoShard, FileAndDataShardsAreDisjointAndCoverTheDataset) {
  const std::vector<std::string> files = make_files();
  const Dataset by_files =
      Dataset::from_files(files)
          .interleave(
              [](const Element& e) {
                return Dataset::from_tfrecord({tensor_bytes(e.at("filename"))});
              },
              {.cycle_length = 2})
          .map(record_to_int)
          .batch(4);
  const Dataset single = Dataset::from_tfrecord(files).map(record_to_int).shuffle(10, 3).batch(4);
  const std::vector<int32_t> all = [&] {
    auto v = drain(single, "value");
    std::sort(v.begin(), v.end());
    return v;
  }();
  ASSERT_EQ(all.size(), 42u);
  for (const Dataset& d : {by_files, single}) {
    for (int workers : {1, 2, 3, 7, 8}) {
      for (AutoShardPolicy policy :
           {AutoShardPolicy::automatic, AutoShardPolicy::data, AutoShardPolicy::file}) {
        if (policy == AutoShardPolicy::file && workers > 7) {
          EXPECT_THROW(auto_shard(d, workers, 0, policy), InvalidArgument);
          continue;
        }
        std::vector<int32_t> union_of_shards;
        for (int w = 0; w < workers; ++w) {
          const auto part = drain(auto_shard(d, workers, w, policy), "value");
          union_of_shards.insert(union_of_shards.end(), part.begin(), part.end());
        }
        std::sort(union_of_shards.begin(), union_of_shards.end());
        EXPECT_EQ(union_of_shards, all)
            << workers << " workers, " << auto_shard_policy_name(policy);
      }
    }
  }
  // FILE sharding reads whole files: worker 0 of 2 holds files 0, 2, 4, 6.
  const auto worker0 = drain(auto_shard(by_files, 2, 0, AutoShardPolicy::file), "value");
  for (int32_t v : worker0) EXPECT_EQ((v / 100) % 2, 0) << v;
  EXPECT_NE(auto_shard(by_files, 2, 0).describe().find("files(4)"), std::string::npos);
  EXPECT_NE(auto_shard(Dataset::range(10), 2, 0).describe().find("shard(0/2)"), std::string::npos);
  EXPECT_EQ(parse_auto_shard_policy("data"), AutoShardPolicy::data);
  EXPECT_THROW(parse_auto_shard_policy("row"), InvalidArgument);
}

TEST(SplitBatch, EvenAsPossibleAndNothingDropped) {
  Iterator it = Dataset::range(10).batch(10).iterator();
  const Element batch = *it.next();
  const std::vector<Element> parts = split_batch(batch, 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].at("index").to_ints(), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(parts[1].at("index").to_ints(), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(parts[2].at("index").to_ints(), (std::vector<int32_t>{7, 8, 9}));
  const std::vector<Element> thin =
      split_batch(split_batch(batch, 5)[0], 4);  // 2 rows over 4 parts
  EXPECT_EQ(thin[0].at("index").numel(), 1);
  EXPECT_EQ(thin[3].at("index").numel(), 0);
  EXPECT_THROW(split_batch(batch, 0), InvalidArgument);
}

}  // namespace
}  // namespace tandem::data
