// The Dataset pipeline: every transformation's semantics, order and
// determinism under parallelism, error propagation, cache, statistics.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include "support/test_data.h"
#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/data/dataset.h"
#include "tandem/data/detail/thread_pool.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

using testing::drain;

std::vector<int32_t> iota(int32_t n, int32_t start = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

// Adds 1000 after a random delay, so that parallel calls finish out of order.
Element slow_plus_1000(Element e) {
  const int32_t v = e.at("index").to_ints()[0];
  std::this_thread::sleep_for(std::chrono::microseconds(mix_seed(v, 1) % 300));
  Tensor t = Tensor::empty(Shape{}, DType::i32);
  t.data<int32_t>()[0] = v + 1000;
  return Element{{"index", t}};
}

TEST(Pipeline, SourcesAndDescribe) {
  EXPECT_EQ(drain(Dataset::range(5)), iota(5));
  const Tensor x = Tensor::from_floats(Shape{3, 2}, std::vector<float>{1, 2, 3, 4, 5, 6});
  const Tensor y = Tensor::from_ints(Shape{3}, std::vector<int32_t>{7, 8, 9});
  Iterator it = Dataset::from_tensors({{"x", x}, {"y", y}}).iterator();
  auto first = it.next();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->at("x").shape(), (Shape{2}));
  EXPECT_EQ(first->at("x").to_floats(), (std::vector<float>{1, 2}));
  EXPECT_EQ(first->at("y").shape(), Shape{});
  EXPECT_THROW(first->at("z"), InvalidArgument);
  EXPECT_THROW(Dataset::from_tensors({{"x", x}, {"y", Tensor::zeros(Shape{2})}}), ShapeError);
  EXPECT_EQ(Dataset::range(3).map([](Element e) { return e; }).batch(2).prefetch(4).describe(),
            "range(3) -> map -> batch(2) -> prefetch(4)");
  // int32 elements: a longer range wrapped past 2^31 - 1.
  EXPECT_EQ(Dataset::range(int64_t{1} << 31).cardinality(), int64_t{1} << 31);
  EXPECT_THROW(Dataset::range((int64_t{1} << 31) + 1), InvalidArgument);
  EXPECT_THROW(Dataset::range(-1), InvalidArgument);
}

// Each pass calls the program's function once; a pass yields what its
// iterator gives, numbered by the pass, until it ends.
// A program's iterator counting the calls it gets after saying it is done.
struct Finite : IteratorBase {
  int32_t next_value = 0, end;
  int* calls_after_end;
  Finite(int32_t n, int* after_end) : end(n), calls_after_end(after_end) {}
  std::optional<Element> next() override {
    if (next_value >= end) {
      ++*calls_after_end;
      return std::nullopt;
    }
    Tensor t = Tensor::empty(Shape{}, DType::i32);
    t.data<int32_t>()[0] = next_value++;
    return Element{{"index", t}};
  }
};

// A program's iterator is not asked again once it said it was done (a
// batch after a short last batch asked again, as did a take longer than
// the pass and a skip past it); a huge batch is "everything" without
// reserving for its size; a counted repeat goes past an empty pass.
TEST(Pipeline, EndsAreFinal) {
  int after_end = 0;
  const Dataset five = Dataset::from_generator(
      [&](int64_t) { return std::make_unique<Finite>(5, &after_end); }, "five");
  for (const Dataset& d : {five.batch(3), five.take(9), five.skip(9)}) {
    after_end = 0;
    Iterator it = d.iterator();
    while (it.next()) {
    }
    EXPECT_FALSE(it.next().has_value());
    EXPECT_EQ(after_end, 1) << d.describe();
  }
  const std::vector<Element> all = [&] {
    std::vector<Element> out;
    Iterator it = Dataset::range(100).batch(int64_t{1} << 40).iterator();
    while (auto e = it.next()) out.push_back(std::move(*e));
    return out;
  }();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].at("index").dim(0), 100);
  // Passes 0 and 2 yield 0, 1; pass 1 nothing.
  const Dataset gappy = Dataset::from_generator(
      [&](int64_t pass) { return std::make_unique<Finite>(pass % 3 == 1 ? 0 : 2, &after_end); },
      "gappy");
  EXPECT_EQ(drain(gappy.repeat(3)), (std::vector<int32_t>{0, 1, 0, 1}));
  Iterator endless = gappy.repeat().iterator();
  EXPECT_TRUE(endless.next() && endless.next());
  EXPECT_FALSE(endless.next().has_value());  // pass 1 is empty: the end
  EXPECT_FALSE(endless.next().has_value());  // for good (it started pass 2)
}

// Dataset::iterator(k) over a repeat(n): the passes below the repeat are
// k*n .. k*n + n-1, so that consecutive epochs never replay an order (the
// second half of epoch k was the first half of epoch k + 1).
TEST(Pipeline, NumberedPassesDoNotOverlapBelowARepeat) {
  const Dataset twice = Dataset::range(16).shuffle(16, 5).repeat(2);
  std::set<std::vector<int32_t>> orders;
  for (int64_t pass = 0; pass < 3; ++pass) {
    Iterator it = twice.iterator(pass);
    for (int half = 0; half < 2; ++half) {
      std::vector<int32_t> order;
      for (int i = 0; i < 16; ++i) order.push_back(it.next()->at("index").to_ints()[0]);
      orders.insert(order);
    }
  }
  EXPECT_EQ(orders.size(), 6u);
  // Pass k is the same whatever came before.
  Iterator again = twice.iterator(1);
  Iterator fresh = Dataset::range(16).shuffle(16, 5).repeat(2).iterator(1);
  for (int i = 0; i < 32; ++i)
    EXPECT_EQ(again.next()->at("index").to_ints(), fresh.next()->at("index").to_ints()) << i;
}

TEST(Pipeline, GeneratorMakesOneIteratorPerPass) {
  struct Count : IteratorBase {
    int32_t next_value, end;
    Count(int32_t from, int32_t to) : next_value(from), end(to) {}
    std::optional<Element> next() override {
      if (next_value >= end) return std::nullopt;
      Tensor t = Tensor::empty(Shape{}, DType::i32);
      t.data<int32_t>()[0] = next_value++;
      return Element{{"index", t}};
    }
  };
  std::vector<int64_t> passes;
  const Dataset d = Dataset::from_generator(
      [&](int64_t pass) {
        passes.push_back(pass);
        return std::make_unique<Count>(static_cast<int32_t>(10 * pass),
                                       static_cast<int32_t>(10 * pass + 3));
      },
      "counter", 3);
  EXPECT_EQ(d.cardinality(), 3);
  EXPECT_EQ(drain(d), iota(3));
  EXPECT_EQ(drain(d.batch(2)), iota(3, 10));
  EXPECT_EQ(passes, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(d.repeat(2).describe(), "counter -> repeat(2)");
  EXPECT_THROW(Dataset::from_generator(nullptr), InvalidArgument);
  EXPECT_THROW(Dataset::from_generator([](int64_t) { return nullptr; }).iterator().next(),
               InvalidArgument);
  EXPECT_THROW(Dataset::from_generator([](int64_t) { return nullptr; }, "g", -7), InvalidArgument);
}

TEST(Pipeline, ParallelMapKeepsOrderForEveryParallelism) {
  const std::vector<int32_t> expected = iota(200, 1000);
  for (int parallel : {1, 2, 3, 8, kAutotune}) {
    EXPECT_EQ(drain(Dataset::range(200).map(slow_plus_1000, {.num_parallel_calls = parallel})),
              expected)
        << parallel;
  }
  // Non-deterministic mode may reorder but yields the same elements.
  std::vector<int32_t> any = drain(
      Dataset::range(200).map(slow_plus_1000, {.num_parallel_calls = 4, .deterministic = false}));
  std::sort(any.begin(), any.end());
  EXPECT_EQ(any, expected);
}

TEST(Pipeline, ErrorsInMapReachTheConsumerInOrder) {
  for (int parallel : {1, 3}) {
    auto failing = [](Element e) {
      if (e.at("index").to_ints()[0] == 5) TANDEM_THROW(InvalidArgument, "bad element 5");
      return e;
    };
    for (bool prefetch : {false, true}) {
      Dataset mapped = Dataset::range(100).map(failing, {.num_parallel_calls = parallel});
      Iterator it = (prefetch ? mapped.prefetch(2) : mapped).iterator();
      for (int i = 0; i < 5; ++i) ASSERT_TRUE(it.next()) << i;
      try {
        it.next();
        FAIL() << "no error";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("bad element 5"), std::string::npos);
      }
      // The pass ends after an error.
      EXPECT_FALSE(it.next()) << "parallel " << parallel << ", prefetch " << prefetch;
    }
  }
  // Destroying an iterator mid-pass stops its threads without hanging.
  for (int k = 0; k < 20; ++k) {
    Iterator it =
        Dataset::range(1000).map(slow_plus_1000, {.num_parallel_calls = 4}).prefetch(8).iterator();
    it.next();
  }
}

// A map function that iterates a parallel map of its own, on every pool
// worker at once: the inner maps run on the calling worker (or, behind a
// prefetch and a lazily started repeat, on a thread it started) instead of
// waiting for workers that are all busy (which would hang), give the same
// elements, and leave the outer call's element seed as it was.
TEST(Pipeline, NestedParallelMapsOnEveryPoolWorkerFinish) {
  const Dataset direct = Dataset::range(40).map(slow_plus_1000, {.num_parallel_calls = kAutotune});
  const Dataset behind_prefetch =
      Dataset::range(20).map(slow_plus_1000, {.num_parallel_calls = 2}).repeat(2).prefetch(2);
  const auto outer_fn = [direct, behind_prefetch](Element e) {
    const uint64_t seed = element_random_seed();
    const bool prefetched = e.at("index").to_ints()[0] % 2 == 1;
    const std::vector<int32_t> values = drain(prefetched ? behind_prefetch : direct);
    int32_t sum = 0;
    for (int32_t v : values) sum += v;
    if (element_random_seed() != seed) throw std::runtime_error("the nested map moved the seed");
    Tensor t = Tensor::empty(Shape{}, DType::i32);
    t.data<int32_t>()[0] = e.at("index").to_ints()[0] * 100000 + sum;
    return Element{{"index", t}};
  };
  // More parallel calls than pool workers: every worker is inside outer_fn.
  const int calls = detail::data_pool().size() + 1;
  std::vector<int32_t> expected;
  for (int32_t i = 0; i < 2 * calls; ++i) {
    const int32_t sum = i % 2 == 1 ? 2 * (20 * 1000 + 19 * 20 / 2) : 40 * 1000 + 39 * 40 / 2;
    expected.push_back(i * 100000 + sum);
  }
  struct Result {
    std::atomic<bool> done = false;
    std::vector<int32_t> got;
  };
  auto result = std::make_shared<Result>();  // outlives a consumer left hanging
  std::thread consumer([result, outer_fn, calls] {
    result->got = drain(Dataset::range(2 * calls).map(outer_fn, {.num_parallel_calls = calls}));
    result->done = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!result->done && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!result->done) {
    consumer.detach();
    FAIL() << "nested parallel maps hung";
  }
  consumer.join();
  EXPECT_EQ(result->got, expected);
}

TEST(Pipeline, BatchRemainderAndShapeMismatch) {
  Iterator it = Dataset::range(7).batch(3).iterator();
  std::vector<Shape> shapes;
  while (auto e = it.next()) shapes.push_back(e->at("index").shape());
  EXPECT_EQ(shapes, (std::vector<Shape>{Shape{3}, Shape{3}, Shape{1}}));
  EXPECT_EQ(drain(Dataset::range(7).batch(3, true)), iota(6));
  auto ragged = Dataset::range(4).map([](Element e) {
    const int32_t v = e.at("index").to_ints()[0];
    return Element{{"x", Tensor::zeros(Shape{v == 2 ? 3 : 2})}};
  });
  try {
    drain(ragged.batch(4), "x");
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("feature 'x' of element 2"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Dataset::range(3).batch(0), InvalidArgument);
}

TEST(Pipeline, ShuffleIsAPermutationDeterministicPerSeedAndPass) {
  const Dataset shuffled = Dataset::range(100).shuffle(30, 7);
  const std::vector<int32_t> a = drain(shuffled), b = drain(shuffled);
  std::vector<int32_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(100));
  EXPECT_NE(a, iota(100));
  EXPECT_NE(a, b);                                          // reshuffled on the second pass
  EXPECT_EQ(a, drain(Dataset::range(100).shuffle(30, 7)));  // same seed, first pass
  EXPECT_NE(a, drain(Dataset::range(100).shuffle(30, 8)));
  const Dataset fixed = Dataset::range(50).shuffle(50, 3, false);
  EXPECT_EQ(drain(fixed), drain(fixed));
  // Order does not depend on upstream parallelism.
  EXPECT_EQ(
      drain(Dataset::range(100).map(slow_plus_1000, {.num_parallel_calls = 4}).shuffle(30, 7)),
      drain(Dataset::range(100).map(slow_plus_1000).shuffle(30, 7)));
}

TEST(Pipeline, RepeatTakeSkipFilter) {
  EXPECT_EQ(drain(Dataset::range(3).repeat(2)), (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(drain(Dataset::range(3).repeat().take(7)), (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(drain(Dataset::range(0).repeat()), std::vector<int32_t>{});  // no endless empty loop
  EXPECT_EQ(drain(Dataset::range(10).skip(7)), (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(drain(Dataset::range(10).skip(20)), std::vector<int32_t>{});
  EXPECT_EQ(drain(Dataset::range(10).filter(
                [](const Element& e) { return e.at("index").to_ints()[0] % 3 == 0; })),
            (std::vector<int32_t>{0, 3, 6, 9}));
  // Each repeat reshuffles.
  const std::vector<int32_t> twice = drain(Dataset::range(20).shuffle(20, 1).repeat(2));
  EXPECT_NE(std::vector<int32_t>(twice.begin(), twice.begin() + 20),
            std::vector<int32_t>(twice.begin() + 20, twice.end()));
}

TEST(Pipeline, ShardsAreDisjointAndCoverTheDataset) {
  for (int64_t shards : {1, 2, 3, 7}) {
    std::vector<int32_t> all;
    for (int64_t i = 0; i < shards; ++i) {
      const std::vector<int32_t> part = drain(Dataset::range(50).shard(shards, i));
      all.insert(all.end(), part.begin(), part.end());
    }
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, iota(50)) << shards;
  }
  EXPECT_THROW(Dataset::range(5).shard(2, 2), InvalidArgument);
}

TEST(Pipeline, MemoryCacheRunsUpstreamOnce) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  const Dataset cached = Dataset::range(20)
                             .map([calls](Element e) {
                               ++*calls;
                               return e;
                             })
                             .cache();
  // A pass stopped early does not fill the cache.
  {
    Iterator it = cached.iterator();
    it.next();
  }
  EXPECT_EQ(drain(cached), iota(20));
  const int after_full_pass = calls->load();
  EXPECT_EQ(drain(cached), iota(20));
  EXPECT_EQ(calls->load(), after_full_pass);
}

TEST(Pipeline, FileCacheIsWrittenWhenCompleteAndReadBack) {
  const std::string path = (fs::path(TANDEM_TEST_TMPDIR) / "pipeline.cache").string();
  fs::remove(path);
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto counted = [calls](Element e) {
    ++*calls;
    return e;
  };
  {
    Iterator it = Dataset::range(10).map(counted).cache(path).iterator();
    it.next();
  }
  EXPECT_FALSE(fs::exists(path));  // incomplete pass
  EXPECT_EQ(drain(Dataset::range(10).map(counted).cache(path).batch(4)), iota(10));
  EXPECT_TRUE(fs::exists(path));
  calls->store(0);
  EXPECT_EQ(drain(Dataset::range(10).map(counted).cache(path)), iota(10));
  EXPECT_EQ(calls->load(), 0);  // read from the file
  fs::resize_file(path, fs::file_size(path) - 3);
  EXPECT_THROW(drain(Dataset::range(10).cache(path)), IoError);
}

TEST(Pipeline, PrefetchKeepsOrderAndAutotuneGrowsForASlowProducer) {
  const Dataset d = Dataset::range(300)
                        .map(slow_plus_1000, {.num_parallel_calls = kAutotune})
                        .prefetch(kAutotune);
  EXPECT_EQ(drain(d), iota(300, 1000));
  const std::vector<StageStats> stats = d.stats();
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[0].stage, "range(300)");
  EXPECT_EQ(stats[1].stage, "map(autotune)");
  EXPECT_EQ(stats[1].elements, 300);
  EXPECT_GT(stats[1].busy_seconds, 0.0);
  EXPECT_GT(stats[1].buffer_capacity, 1);  // parallelism grew: the consumer was waiting
  EXPECT_GT(stats[2].buffer_capacity, 1);
  EXPECT_THROW(Dataset::range(3).prefetch(0), InvalidArgument);
}

TEST(Pipeline, InterleaveRoundRobinsOpenDatasets) {
  // Element k opens range(3) shifted by 10 k.
  auto make = [](const Element& e) {
    const int32_t k = e.at("index").to_ints()[0];
    return Dataset::range(3).map([k](Element x) {
      Tensor t = Tensor::empty(Shape{}, DType::i32);
      t.data<int32_t>()[0] = x.at("index").to_ints()[0] + 10 * k;
      return Element{{"index", t}};
    });
  };
  const std::vector<int32_t> expected = {0, 10, 1, 11, 2, 12, 20, 21, 22};
  EXPECT_EQ(drain(Dataset::range(3).interleave(make, {.cycle_length = 2})), expected);
  EXPECT_EQ(drain(Dataset::range(3).interleave(make, {.cycle_length = 2, .num_parallel_calls = 2})),
            expected);
  EXPECT_EQ(drain(Dataset::range(2).interleave(make, {.cycle_length = 2, .block_length = 2})),
            (std::vector<int32_t>{0, 1, 10, 11, 2, 12}));
  EXPECT_THROW(Dataset::range(2).interleave(make, {.cycle_length = 0}), InvalidArgument);
}

// A shuffle inside the opened datasets draws a new order each pass, and
// pass k's order is the same whatever passes came before (a resumed epoch).
TEST(Pipeline, InterleaveStartsItsDatasetsAtItsOwnPass) {
  auto shuffled = [](const Element&) { return Dataset::range(20).shuffle(20, /*seed=*/7); };
  auto drain_pass = [](const Dataset& d, int64_t pass) {
    std::vector<int32_t> out;
    Iterator it = d.iterator(pass);
    while (auto e = it.next()) out.push_back(e->at("index").to_ints()[0]);
    return out;
  };
  for (int parallel : {1, 2}) {
    const Dataset d =
        Dataset::range(2).interleave(shuffled, {.cycle_length = 2, .num_parallel_calls = parallel});
    const std::vector<int32_t> first = drain(d);
    const std::vector<int32_t> second = drain(d);
    EXPECT_NE(first, second) << "parallel " << parallel;
    EXPECT_EQ(drain_pass(d, 1), second) << "parallel " << parallel;
    EXPECT_EQ(drain_pass(d, 0), first) << "parallel " << parallel;
  }
}

TEST(Pipeline, TemporaryDatasetsStayAliveWhileIterated) {
  Iterator it =
      Dataset::range(50).map(slow_plus_1000, {.num_parallel_calls = 2}).prefetch(4).iterator();
  int count = 0;
  while (it.next()) ++count;
  EXPECT_EQ(count, 50);
}

TEST(Pipeline, DestroyingAParallelMapWaitsForTheCallsInFlight) {
  // A call still running after its iterator is gone could outlive the
  // program's static state at exit (it crashed in oneDNN once).
  std::atomic<int> running{0}, calls{0};
  {
    Iterator it = Dataset::range(1000)
                      .map(
                          [&](Element e) {
                            ++running;
                            ++calls;
                            std::this_thread::sleep_for(std::chrono::milliseconds(20));
                            --running;
                            return e;
                          },
                          {.num_parallel_calls = 4})
                      .iterator();
    ASSERT_TRUE(it.next().has_value());
  }
  EXPECT_EQ(running.load(), 0);
  // Cancelled chunks stop after their current call instead of draining the input.
  EXPECT_LT(calls.load(), 100);
}

TEST(Pipeline, AssigningToARunningIteratorStopsItBeforeFreeingItsNodes) {
  // The map's function, and so the nodes that hold it, must outlive every
  // call the prefetch's producer makes (they were freed first, and the
  // producer then ran in freed memory).
  std::atomic<bool> freed{false}, used_after_free{false};
  struct Guard {
    explicit Guard(std::atomic<bool>* f) : freed(f) {}
    ~Guard() { *freed = true; }
    std::atomic<bool>* freed;
  };
  auto guard = std::make_shared<Guard>(&freed);
  Iterator it = Dataset::range(100)
                    .map([guard, &freed, &used_after_free](Element e) {
                      std::this_thread::sleep_for(std::chrono::milliseconds(20));
                      if (freed.load()) used_after_free = true;
                      return e;
                    })
                    .prefetch(8)
                    .iterator();
  guard.reset();  // the map's copy is the last
  ASSERT_TRUE(it.next().has_value());
  it = Iterator();
  EXPECT_TRUE(freed.load());
  EXPECT_FALSE(used_after_free.load());
}

TEST(Pipeline, FromIdxReadsFashionMnist) {
  const std::string dir = TANDEM_FASHION_MNIST_DIR;
  const Dataset d =
      Dataset::from_idx(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz");
  Iterator it = d.batch(1000).iterator();
  int batches = 0;
  while (auto e = it.next()) {
    EXPECT_EQ(e->at("image").shape(), (Shape{1000, 28, 28}));
    EXPECT_EQ(e->at("label").dtype(), DType::i32);
    ++batches;
  }
  EXPECT_EQ(batches, 10);
  EXPECT_THROW(
      Dataset::from_idx(dir + "/t10k-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz"),
      IoError);
}

}  // namespace
}  // namespace tandem::data
