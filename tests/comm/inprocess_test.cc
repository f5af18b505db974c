// In-process collectives against naive double-precision reductions, over rank
// counts 1..8, sizes from 0 to several MiB, every dtype and op, in place or
// not, through both the staged small-message path and the sliced path.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <thread>

#include "support/collective_values.h"
#include "support/ranks.h"
#include "tandem/base/error.h"
#include "tandem/comm/inprocess.h"

namespace tandem::comm {
namespace {

using testing::run_ranks;

double value(int r, int64_t i, DType dtype) {
  return testing::collective_value(r, i, dtype);
}
Tensor rank_input(int r, int64_t n, DType dtype) {
  return testing::collective_input(r, n, dtype);
}
double reduce_reference(ReduceOp op, int ranks, int64_t i, DType dtype) {
  return testing::collective_reference(op, ranks, i, dtype);
}
double tolerance(DType dtype, double expected) {
  return dtype == DType::f32 || dtype == DType::i32
             ? testing::collective_tolerance(dtype, expected)
             : std::abs(expected) * (dtype == DType::bf16 ? 1.0 / 128 : 1.0 / 1024);
}

struct Case {
  int ranks;
  int64_t count;
  DType dtype;
  ReduceOp op;
  bool in_place;
  int64_t small_bytes;  // 0 forces the sliced path
};

std::string case_name(const Case& c) {
  return tandem::detail::concat(c.ranks, "ranks_", c.count, "_", dtype_name(c.dtype), "_",
                                reduce_op_name(c.op), c.in_place ? "_inplace" : "_outofplace",
                                c.small_bytes == 0 ? "_sliced" : "");
}

class AllReduceTest : public ::testing::TestWithParam<Case> {};

TEST_P(AllReduceTest, MatchesNaiveReduction) {
  const Case c = GetParam();
  InProcessGroup group(c.ranks, {.small_message_bytes = c.small_bytes});
  std::vector<Tensor> outputs(static_cast<size_t>(c.ranks));
  run_ranks(c.ranks, [&](int r) {
    auto comm = group.communicator(r);
    Tensor input = rank_input(r, c.count, c.dtype);
    Tensor output = c.in_place ? input : Tensor::full(Shape{c.count}, -99.0f, c.dtype);
    comm->all_reduce(input, output, c.op);
    if (!c.in_place) {
      // The input is untouched.
      const std::vector<float> in = input.to_floats();
      for (int64_t i = 0; i < c.count; ++i) {
        if (in[i] != static_cast<float>(value(r, i, c.dtype))) {
          TANDEM_THROW(Error, "rank ", r, " input changed at ", i);
        }
      }
    }
    outputs[r] = output;
  });
  for (int r = 0; r < c.ranks; ++r) {
    const std::vector<float> got = outputs[r].to_floats();
    for (int64_t i = 0; i < c.count; ++i) {
      const double expected = reduce_reference(c.op, c.ranks, i, c.dtype);
      ASSERT_LE(std::abs(got[i] - expected), tolerance(c.dtype, expected))
          << "rank " << r << " element " << i << ": " << got[i] << " vs " << expected;
    }
  }
}

std::vector<Case> all_reduce_cases() {
  std::vector<Case> cases;
  for (int ranks : {1, 2, 3, 4, 5, 8}) {
    for (int64_t count : {0, 1, 2, 3, 7, 31, 1009, 5000}) {
      for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::i32}) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min}) {
          if (dtype == DType::i32 && op == ReduceOp::mean) continue;
          for (int64_t small : {int64_t{0}, int64_t{32 * 1024}}) {
            cases.push_back({ranks, count, dtype, op, (count + ranks) % 2 == 0, small});
          }
        }
      }
    }
  }
  // Several MiB: far past the chunk size and the small-message threshold.
  const int64_t big = (4 << 20) / 4 + 3;
  for (int ranks : {2, 3, 8}) {
    for (bool in_place : {true, false}) {
      cases.push_back({ranks, big, DType::f32, ReduceOp::sum, in_place, 32 * 1024});
      cases.push_back({ranks, big, DType::bf16, ReduceOp::mean, in_place, 32 * 1024});
    }
  }
  cases.push_back({2, big, DType::i32, ReduceOp::max, true, 32 * 1024});
  cases.push_back({7, big, DType::f16, ReduceOp::sum, false, 32 * 1024});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, AllReduceTest, ::testing::ValuesIn(all_reduce_cases()),
                         [](const auto& param_info) { return case_name(param_info.param); });

class OtherCollectivesTest : public ::testing::TestWithParam<std::tuple<int, int64_t, DType>> {};

TEST_P(OtherCollectivesTest, ReduceScatterAllGatherBroadcast) {
  // (Not a structured binding: clang 14 cannot capture one in a lambda.)
  const int ranks = std::get<0>(GetParam());
  const int64_t count = std::get<1>(GetParam());
  const DType dtype = std::get<2>(GetParam());
  InProcessGroup group(ranks);
  std::vector<Tensor> scattered(static_cast<size_t>(ranks)), gathered(static_cast<size_t>(ranks)),
      broadcasted(static_cast<size_t>(ranks));
  const int root = ranks - 1;
  run_ranks(ranks, [&](int r) {
    auto comm = group.communicator(r);
    const Tensor input = rank_input(r, count * ranks, dtype);
    scattered[r] = Tensor::zeros(Shape{count}, dtype);
    comm->reduce_scatter(input, scattered[r], ReduceOp::sum);
    const Tensor mine = rank_input(r, count, dtype);
    gathered[r] = Tensor::zeros(Shape{count * ranks}, dtype);
    comm->all_gather(mine, gathered[r]);
    broadcasted[r] = rank_input(r, count, dtype);
    comm->broadcast(broadcasted[r], root);
    comm->barrier();
  });
  for (int r = 0; r < ranks; ++r) {
    const auto s = scattered[r].to_floats(), g = gathered[r].to_floats(),
               b = broadcasted[r].to_floats();
    for (int64_t i = 0; i < count; ++i) {
      const double expected = reduce_reference(ReduceOp::sum, ranks, r * count + i, dtype);
      ASSERT_LE(std::abs(s[i] - expected), tolerance(dtype, expected))
          << "reduce_scatter rank " << r << " " << i;
      ASSERT_EQ(b[i], static_cast<float>(value(root, i, dtype)))
          << "broadcast rank " << r << " " << i;
    }
    for (int j = 0; j < ranks; ++j) {
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(g[j * count + i], static_cast<float>(value(j, i, dtype)))
            << "all_gather rank " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, OtherCollectivesTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 8),
                                            ::testing::Values(int64_t{0}, int64_t{1}, int64_t{31},
                                                              int64_t{1009}, int64_t{70001}),
                                            ::testing::Values(DType::f32, DType::bf16,
                                                              DType::i32)));

TEST(InProcess, AsyncCollectivesRunInIssueOrderWithSyncOnes) {
  constexpr int kRanks = 3;
  InProcessGroup group(kRanks);
  run_ranks(kRanks, [&](int r) {
    auto comm = group.communicator(r);
    std::vector<Tensor> buffers;
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 6; ++k) {
      buffers.push_back(Tensor::full(Shape{1000 * (k + 1)}, static_cast<float>(r + k)));
      works.push_back(comm->all_reduce_async(buffers.back(), buffers.back(), ReduceOp::sum));
    }
    Tensor sync = Tensor::full(Shape{10}, 1.0f);
    comm->all_reduce(sync, ReduceOp::sum);  // runs after every async one
    for (auto& w : works) EXPECT_TRUE(w->done());
    for (int k = 0; k < 6; ++k) {
      works[k]->wait();
      EXPECT_EQ(buffers[k].to_floats()[7], static_cast<float>(0 + 1 + 2 + 3 * k));
    }
    EXPECT_EQ(sync.to_floats()[0], 3.0f);
  });
}

TEST(InProcess, MismatchedCallsFailOnEveryRank) {
  InProcessGroup group(2);
  std::atomic<int> failures{0};
  auto expect_comm_error = [&](const std::function<void(Communicator&, int)>& call,
                               const char* needle) {
    failures = 0;
    run_ranks(2, [&](int r) {
      auto comm = group.communicator(r);
      try {
        call(*comm, r);
      } catch (const CommError& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        ++failures;
      }
    });
    EXPECT_EQ(failures.load(), 2) << needle;
  };
  expect_comm_error(
      [](Communicator& c, int r) { c.all_reduce(Tensor::zeros(Shape{10 + r}), ReduceOp::sum); },
      "mismatch");
  expect_comm_error(
      [](Communicator& c, int r) {
        c.all_reduce(Tensor::zeros(Shape{10}, r == 0 ? DType::f32 : DType::bf16), ReduceOp::sum);
      },
      "mismatch");
  expect_comm_error(
      [](Communicator& c, int r) {
        if (r == 0) {
          c.barrier();
        } else {
          c.broadcast(Tensor::zeros(Shape{4}), 0);
        }
      },
      "mismatch");
  // An invalid call on one rank: the other rank learns of it instead of waiting.
  expect_comm_error(
      [](Communicator& c, int r) {
        c.all_reduce(Tensor::zeros(Shape{10}), Tensor::zeros(Shape{r == 1 ? 9 : 10}),
                     ReduceOp::sum);
      },
      "rank 1: invalid all_reduce");
  expect_comm_error([](Communicator& c, int) { c.broadcast(Tensor::zeros(Shape{4}), 5); },
                    "root 5");
  // The group still works after these errors.
  run_ranks(2, [&](int r) {
    auto comm = group.communicator(r);
    Tensor t = Tensor::full(Shape{3}, 2.0f);
    comm->all_reduce(t, ReduceOp::sum);
    EXPECT_EQ(t.to_floats()[0], 4.0f);
  });
}

TEST(InProcess, AMissingRankTimesOutNamingItAndBreaksTheGroup) {
  InProcessGroup group(3, {.comm = {.timeout = std::chrono::milliseconds(200)}});
  std::atomic<int> timeouts{0}, told{0};
  run_ranks(3, [&](int r) {
    auto comm = group.communicator(r);
    if (r == 2) return;  // never arrives
    try {
      comm->all_reduce(Tensor::zeros(Shape{8}), ReduceOp::sum);
    } catch (const PeerFailed& e) {
      // The other waiter timed out first and broke the group: the same diagnosis.
      EXPECT_NE(std::string(e.what()).find("rank(s) 2"), std::string::npos) << e.what();
      ++told;
    } catch (const Timeout& e) {
      EXPECT_NE(std::string(e.what()).find("rank(s) 2"), std::string::npos) << e.what();
      ++timeouts;
    }
  });
  EXPECT_GE(timeouts.load(), 1);
  EXPECT_EQ(timeouts.load() + told.load(), 2);
  auto comm = group.communicator(0);
  EXPECT_THROW(comm->barrier(), CommError);
}

TEST(InProcess, AbortEndsEveryWaitingRankAtOnceWithTheReason) {
  // A long deadline: only the abort can end the waits in time.
  InProcessGroup group(3, {.comm = {.timeout = std::chrono::seconds(60)}});
  std::atomic<int> aborted{0};
  const auto start = std::chrono::steady_clock::now();
  run_ranks(3, [&](int r) {
    auto comm = group.communicator(r);
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the others are waiting
      comm->abort("rank 2 gave up");
      return;
    }
    try {
      comm->all_reduce(Tensor::zeros(Shape{100000}), ReduceOp::sum);  // the sliced path
    } catch (const PeerFailed& e) {
      EXPECT_NE(std::string(e.what()).find("rank 2 gave up"), std::string::npos) << e.what();
      ++aborted;
    }
  });
  EXPECT_EQ(aborted.load(), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // Broken for good, on every rank, with the same reason.
  auto comm = group.communicator(1);
  try {
    comm->barrier();
    ADD_FAILURE() << "a broken group ran a collective";
  } catch (const PeerFailed& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 gave up"), std::string::npos) << e.what();
  }
}

TEST(InProcess, BadArguments) {
  EXPECT_THROW(InProcessGroup(0), InvalidArgument);
  InProcessGroup group(2);
  EXPECT_THROW(group.communicator(2), InvalidArgument);
  EXPECT_EQ(parse_reduce_op("mean"), ReduceOp::mean);
  EXPECT_THROW(parse_reduce_op("prod"), InvalidArgument);
  auto solo = InProcessGroup(1).communicator(0);
  EXPECT_THROW(solo->all_reduce(Tensor::zeros(Shape{3}, DType::u8), ReduceOp::sum), CommError);
  EXPECT_THROW(solo->all_reduce(Tensor::zeros(Shape{3}, DType::i64), ReduceOp::sum), CommError);
  EXPECT_THROW(solo->all_reduce(Tensor::zeros(Shape{3}, DType::i32), ReduceOp::mean), CommError);
}

// Reports name the path an all-reduce of a given size takes.
TEST(InProcess, NamesTheAllReduceAlgorithmBySize) {
  InProcessGroup group(2, {.small_message_bytes = 256});
  auto c = group.communicator(0);
  EXPECT_EQ(c->backend(), "inprocess");
  EXPECT_EQ(c->all_reduce_algorithm(0), "staged");
  EXPECT_EQ(c->all_reduce_algorithm(256), "staged");
  EXPECT_EQ(c->all_reduce_algorithm(257), "sliced");
}

TEST(InProcess, ManyBackToBackSmallCallsStayConsistent) {
  // Exercises the one-barrier path's reuse of double-buffered slots.
  constexpr int kRanks = 4;
  InProcessGroup group(kRanks);
  run_ranks(kRanks, [&](int r) {
    auto comm = group.communicator(r);
    Tensor t = Tensor::empty(Shape{1}, DType::i32);
    for (int k = 0; k < 2000; ++k) {
      t.data<int32_t>()[0] = r * k;
      comm->all_reduce(t, k % 3 == 0 ? ReduceOp::max : ReduceOp::sum);
      const int32_t expected = k % 3 == 0 ? (kRanks - 1) * k : k * (0 + 1 + 2 + 3);
      if (t.data<int32_t>()[0] != expected)
        TANDEM_THROW(Error, "rank ", r, " call ", k, " got ", t.data<int32_t>()[0]);
    }
  });
}

}  // namespace
}  // namespace tandem::comm
