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
  // DATA sharding over a list of files splits their records, and with one
  // file (AUTO's DATA case) every worker gets its share: it split the list
  // of files, and a second worker got no file at all.
  const Dataset one_file =
      Dataset::from_files({files[6]})
          .interleave(
              [](const Element& e) {
                return Dataset::from_tfrecord({tensor_bytes(e.at("filename"))});
              },
              {.cycle_length = 2})
          .map(record_to_int);
  for (AutoShardPolicy policy : {AutoShardPolicy::automatic, AutoShardPolicy::data}) {
    EXPECT_EQ(drain(auto_shard(one_file, 2, 0, policy), "value"),
              (std::vector<int32_t>{600, 602, 604, 606, 608}));
    EXPECT_EQ(drain(auto_shard(one_file, 2, 1, policy), "value"),
              (std::vector<int32_t>{601, 603, 605, 607}));
  }
  const std::string data_shard = auto_shard(by_files, 2, 1, AutoShardPolicy::data).describe();
  EXPECT_LT(data_shard.find("interleave"), data_shard.find("shard(1/2)")) << data_shard;
  // FILE sharding reads whole files: worker 0 of 2 holds files 0, 2, 4, 6.
  const auto worker0 = drain(auto_shard(by_files, 2, 0, AutoShardPolicy::file), "value");
  for (int32_t v : worker0) EXPECT_EQ((v / 100) % 2, 0) << v;
  EXPECT_NE(auto_shard(by_files, 2, 0).describe().find("files(4)"), std::string::npos);
  EXPECT_NE(auto_shard(Dataset::range(10), 2, 0).describe().find("shard(0/2)"), std::string::npos);
  EXPECT_EQ(parse_auto_shard_policy("data"), AutoShardPolicy::data);
  EXPECT_THROW(parse_auto_shard_policy("row"), InvalidArgument);
}

// DATA sharding of a shuffled source keeps each worker's share of the
// order one process draws: worker w's k-th element is the one process's
// (k * workers + w)-th, every pass (each reshuffles), so the workers'
// batches together are one process's and training matches one device. It
// used to shard before the shuffle: each worker shuffled its own share.
TEST(AutoShard, DataShardsOfAShuffleInterleaveOneProcesssOrder) {
  const Dataset shuffled = Dataset::range(60).shuffle(16, 7);  // a buffer, not the whole set
  const Dataset whole_set = Dataset::range(60).shuffle(60, 7);
  for (const Dataset& d : {shuffled, whole_set}) {
    for (int workers : {2, 3}) {
      for (int pass = 0; pass < 2; ++pass) {
        Iterator one = d.iterator(pass);
        std::vector<Iterator> parts;
        for (int w = 0; w < workers; ++w)
          parts.push_back(auto_shard(d, workers, w, AutoShardPolicy::data).iterator(pass));
        for (int64_t k = 0;; ++k) {
          const auto expected = one.next();
          auto got = parts[static_cast<size_t>(k % workers)].next();
          ASSERT_EQ(expected.has_value(), got.has_value()) << k;
          if (!expected) break;
          EXPECT_EQ(got->at("index").to_ints(), expected->at("index").to_ints())
              << workers << " workers, pass " << pass << ", element " << k;
        }
      }
    }
  }
  // The shard goes right above the last shuffle: above a map below it,
  // below a map above it.
  const auto same = [](Element e) { return e; };
  const std::string described =
      auto_shard(Dataset::range(60).map(same).shuffle(16, 7).map(same), 2, 1, AutoShardPolicy::data)
          .describe();
  EXPECT_LT(described.find("shuffle(16)"), described.find("shard(1/2)")) << described;
  EXPECT_LT(described.find("shard(1/2)"), described.rfind("map")) << described;
  EXPECT_LT(described.find("map"), described.find("shuffle(16)")) << described;
}

// A take or skip sees the whole stream, as in one process's pipeline (each
// worker took its own N: 4 workers trained 4x the rows, and a skip of half
// the rows left every worker's quarter empty); FILE refuses to split the
// files under one, AUTO splits the data instead.
TEST(AutoShard, TakeAndSkipCountTheWholeStream) {
  const Dataset d = Dataset::range(100).shuffle(100, 3).skip(10).take(50);
  const std::vector<int32_t> expected = [&] {
    auto v = drain(d);
    std::sort(v.begin(), v.end());
    return v;
  }();
  ASSERT_EQ(expected.size(), 50u);
  for (int workers : {2, 4}) {
    for (AutoShardPolicy policy : {AutoShardPolicy::automatic, AutoShardPolicy::data}) {
      std::vector<int32_t> union_of_shards;
      for (int w = 0; w < workers; ++w) {
        const auto part = drain(auto_shard(d, workers, w, policy));
        union_of_shards.insert(union_of_shards.end(), part.begin(), part.end());
      }
      std::sort(union_of_shards.begin(), union_of_shards.end());
      EXPECT_EQ(union_of_shards, expected) << workers << " workers";
    }
  }
  const std::vector<std::string> files = make_files();
  const Dataset first_ten = Dataset::from_tfrecord(files).map(record_to_int).take(10);
  EXPECT_THROW(auto_shard(first_ten, 2, 0, AutoShardPolicy::file), InvalidArgument);
  std::vector<int32_t> halves = drain(auto_shard(first_ten, 2, 0), "value");
  const auto other = drain(auto_shard(first_ten, 2, 1), "value");
  halves.insert(halves.end(), other.begin(), other.end());
  std::sort(halves.begin(), halves.end());
  auto whole = drain(first_ten, "value");
  std::sort(whole.begin(), whole.end());
  EXPECT_EQ(halves, whole);
}

// Random maps above the split seed each element as one process's pipeline
// does (every worker drew the same numbers for its j-th element, so the
// flips and crops of a global batch came in identical groups).
TEST(AutoShard, RandomMapsAboveTheSplitSeedAsOneProcess) {
  const auto seeded = [](Element e) {
    Tensor t = Tensor::empty(Shape{}, DType::i32);
    t.data<int32_t>()[0] = static_cast<int32_t>(element_random_seed() & 0x7FFFFFFF);
    e.set("seed", t);
    return e;
  };
  const Dataset d = Dataset::range(24).shuffle(24, 9).map(seeded);
  const auto one = drain(d, "seed");
  for (int workers : {2, 3}) {
    std::vector<std::vector<int32_t>> parts;
    for (int w = 0; w < workers; ++w)
      parts.push_back(drain(auto_shard(d, workers, w, AutoShardPolicy::data), "seed"));
    for (size_t k = 0; k < one.size(); ++k) {
      EXPECT_EQ(parts[k % workers][k / workers], one[k]) << workers << " workers, element " << k;
    }
  }
  // Below the split, a map yielding in completion order would give each
  // worker another order to split: refused.
  const Dataset racy = Dataset::range(24)
                           .map(seeded, {.num_parallel_calls = 2, .deterministic = false})
                           .shuffle(24, 9);
  EXPECT_THROW(auto_shard(racy, 2, 0, AutoShardPolicy::data), InvalidArgument);
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
