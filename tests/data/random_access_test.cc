// Batches over in-memory sources gather their rows at once; they must be the
// same bytes as the element-by-element path. Passes numbered explicitly
// (Dataset::iterator(pass)) and cardinalities known without reading.
#include <gtest/gtest.h>

#include <cstring>

#include "tandem/base/error.h"
#include "tandem/data/dataset.h"

namespace tandem::data {
namespace {

// 23 rows: a float feature (23, 2, 3) and an int label (23,), row r holding r.
Dataset rows() {
  std::vector<float> x(23 * 6);
  std::vector<int32_t> y(23);
  for (int r = 0; r < 23; ++r) {
    for (int i = 0; i < 6; ++i) x[r * 6 + i] = static_cast<float>(100 * r + i);
    y[r] = r;
  }
  return Dataset::from_tensors(
      {{"x", Tensor::from_floats(Shape{23, 2, 3}, x)}, {"y", Tensor::from_ints(Shape{23}, y)}});
}

// Every batch of a pass as (feature -> bytes), in order.
std::vector<std::vector<std::string>> batches_of(const Dataset& d, int64_t pass) {
  std::vector<std::vector<std::string>> out;
  Iterator it = d.iterator(pass);
  while (auto e = it.next()) {
    std::vector<std::string> features;
    for (const auto& [name, t] : e->features()) {
      std::string bytes(static_cast<const char*>(t.raw_data()), t.nbytes());
      features.push_back(name + " " + t.shape().to_string() + " " + bytes);
    }
    out.push_back(std::move(features));
  }
  return out;
}

using Chain = std::function<Dataset(const Dataset&)>;

TEST(RandomAccess, GatheredBatchesAreTheStackedOnes) {
  const std::vector<std::pair<std::string, Chain>> chains = {
      {"plain", [](const Dataset& d) { return d; }},
      {"shuffle", [](const Dataset& d) { return d.shuffle(23, 7); }},
      {"small shuffle buffer", [](const Dataset& d) { return d.shuffle(5, 7); }},
      {"no reshuffle", [](const Dataset& d) { return d.shuffle(23, 7, false); }},
      {"shard", [](const Dataset& d) { return d.shard(3, 1); }},
      {"shuffle shard", [](const Dataset& d) { return d.shuffle(23, 2).shard(2, 0); }},
      {"skip take", [](const Dataset& d) { return d.skip(4).take(13); }},
      {"take past the end", [](const Dataset& d) { return d.take(40).skip(20); }},
  };
  for (const auto& [name, chain] : chains) {
    for (bool drop : {false, true}) {
      for (int64_t batch : {1, 4, 23, 30}) {
        const Dataset gathered = chain(rows()).batch(batch, drop);
        // A map between stops the gather path: elements are stacked.
        const Dataset stacked = chain(rows().map([](Element e) { return e; })).batch(batch, drop);
        for (int64_t pass : {0, 1, 5}) {
          EXPECT_EQ(batches_of(gathered, pass), batches_of(stacked, pass))
              << name << ", batch " << batch << (drop ? ", drop" : "") << ", pass " << pass;
        }
        EXPECT_EQ(gathered.cardinality(), stacked.cardinality()) << name;
        EXPECT_EQ(gathered.cardinality(), static_cast<int64_t>(batches_of(gathered, 0).size()))
            << name << ", batch " << batch;
      }
    }
  }
}

TEST(RandomAccess, StageCountersCountGatheredRows) {
  const Dataset d = rows().shuffle(23, 1).batch(10);
  Iterator it = d.iterator();
  while (it.next()) {
  }
  const std::vector<StageStats> stats = d.stats();
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[0].elements, 23);  // rows gathered from the source
  EXPECT_EQ(stats[1].elements, 23);  // positions the shuffle yielded
  EXPECT_EQ(stats[2].elements, 3);   // batches
}

TEST(Passes, PassKIsTheSameWhateverCameBefore) {
  const Dataset d = rows().map([](Element e) { return e; }).shuffle(23, 3);
  const auto fresh_pass_2 = batches_of(rows().map([](Element e) { return e; }).shuffle(23, 3), 2);
  batches_of(d, 0);
  batches_of(d, 1);
  batches_of(d, 7);
  EXPECT_EQ(batches_of(d, 2), fresh_pass_2);
  EXPECT_NE(batches_of(d, 2), batches_of(d, 3));
  EXPECT_THROW(d.iterator(-1), InvalidArgument);
}

TEST(Cardinality, KnownThroughSelectionsMapsAndBatchesUnknownThroughFilters) {
  const Dataset d = rows();
  EXPECT_EQ(d.cardinality(), 23);
  EXPECT_EQ(d.shuffle(4, 0).map([](Element e) { return e; }).prefetch(2).cardinality(), 23);
  EXPECT_EQ(d.shard(4, 3).cardinality(), 5);  // rows 3, 7, 11, 15, 19
  EXPECT_EQ(d.shard(30, 25).cardinality(), 0);
  EXPECT_EQ(d.take(5).cardinality(), 5);
  EXPECT_EQ(d.skip(30).cardinality(), 0);
  EXPECT_EQ(d.batch(5).cardinality(), 5);
  EXPECT_EQ(d.batch(5, true).cardinality(), 4);
  EXPECT_EQ(d.repeat(3).cardinality(), 69);
  EXPECT_EQ(d.repeat().cardinality(), kInfiniteCardinality);
  EXPECT_EQ(d.repeat().take(50).cardinality(), 50);
  EXPECT_EQ(d.filter([](const Element&) { return true; }).cardinality(), kUnknownCardinality);
  EXPECT_EQ(d.filter([](const Element&) { return true; }).batch(2).cardinality(),
            kUnknownCardinality);
  EXPECT_EQ(Dataset::range(0).repeat().cardinality(), 0);
}

}  // namespace
}  // namespace tandem::data
