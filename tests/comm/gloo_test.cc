// Collectives over gloo between ranks that meet through a rendezvous store
// (threads of this process here, each with its own connections, as
// processes have): against naive reductions over rank counts, sizes, dtypes
// and ops; mismatched calls, aborts, a lost peer and a silent one end every
// rank's wait with an error naming the cause.
#include "tandem/comm/gloo.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "support/collective_values.h"
#include "support/ranks.h"
#include "tandem/base/error.h"

namespace tandem::comm {
namespace {

using namespace std::chrono_literals;
using testing::run_ranks;

// A fresh prefix per group: a prefix is used once.
std::string next_prefix() {
  static std::atomic<int> groups{0};
  return "test" + std::to_string(groups++);
}

std::unique_ptr<Communicator> member(const StoreServer& server, const std::string& prefix, int rank,
                                     int size, CommOptions options = {}) {
  std::shared_ptr<Store> store = connect_store("127.0.0.1", server.port(), 5s);
  return make_gloo_communicator(store, prefix, rank, size, options);
}

double tolerance(DType dtype, double expected, int ranks) {
  return testing::collective_tolerance(dtype, expected, ranks);
}

class GlooCollectivesTest : public ::testing::TestWithParam<std::tuple<int, int64_t>> {};

TEST_P(GlooCollectivesTest, MatchNaiveReductions) {
  const int ranks = std::get<0>(GetParam());
  const int64_t count = std::get<1>(GetParam());
  StoreServer server;
  const std::string prefix = next_prefix();
  struct Result {
    DType dtype;
    ReduceOp op;
    bool in_place;
    std::vector<Tensor> outputs;
  };
  std::vector<Result> reduced;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::i32}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min}) {
      if (dtype == DType::i32 && op == ReduceOp::mean) continue;
      const bool in_place = reduced.size() % 2 == 0;
      reduced.push_back({dtype, op, in_place, std::vector<Tensor>(static_cast<size_t>(ranks))});
    }
  }
  std::vector<Tensor> scattered(ranks), gathered(ranks), broadcasted(ranks);
  run_ranks(ranks, [&](int r) {
    auto comm = member(server, prefix, r, ranks);
    EXPECT_EQ(comm->rank(), r);
    EXPECT_EQ(comm->size(), ranks);
    EXPECT_EQ(comm->backend(), "gloo");
    for (Result& c : reduced) {
      Tensor input = testing::collective_input(r, count, c.dtype);
      Tensor output = c.in_place ? input : Tensor::full(Shape{count}, -99.0f, c.dtype);
      comm->all_reduce(input, output, c.op);
      c.outputs[r] = output;
    }
    scattered[r] = Tensor::zeros(Shape{count}, DType::f32);
    comm->reduce_scatter(testing::collective_input(r, count * ranks, DType::f32), scattered[r],
                         ReduceOp::sum);
    gathered[r] = Tensor::zeros(Shape{count * ranks}, DType::bf16);
    comm->all_gather(testing::collective_input(r, count, DType::bf16), gathered[r]);
    broadcasted[r] = testing::collective_input(r, count, DType::i32);
    comm->broadcast(broadcasted[r], ranks - 1);
    // Asynchronous calls complete in issue order.
    Tensor twice = Tensor::full(Shape{count}, 1.0f, DType::f32);
    auto first = comm->all_reduce_async(twice, twice, ReduceOp::sum);
    auto second = comm->all_reduce_async(twice, twice, ReduceOp::sum);
    second->wait();
    EXPECT_TRUE(first->done());
    for (float v : twice.to_floats()) ASSERT_EQ(v, static_cast<float>(ranks * ranks));
    comm->barrier();
  });
  for (const Result& c : reduced) {
    for (int r = 0; r < ranks; ++r) {
      const std::vector<float> got = c.outputs[r].to_floats();
      for (int64_t i = 0; i < count; ++i) {
        const double expected = testing::collective_reference(c.op, ranks, i, c.dtype);
        ASSERT_LE(std::abs(got[i] - expected), tolerance(c.dtype, expected, ranks))
            << dtype_name(c.dtype) << " " << reduce_op_name(c.op) << " rank " << r << " element "
            << i << ": " << got[i] << " vs " << expected;
      }
    }
  }
  for (int r = 0; r < ranks; ++r) {
    const auto s = scattered[r].to_floats(), g = gathered[r].to_floats(),
               b = broadcasted[r].to_floats();
    for (int64_t i = 0; i < count; ++i) {
      const double expected =
          testing::collective_reference(ReduceOp::sum, ranks, r * count + i, DType::f32);
      ASSERT_NEAR(s[i], expected, tolerance(DType::f32, expected, 1)) << "reduce_scatter " << i;
      ASSERT_EQ(b[i], static_cast<float>(testing::collective_value(ranks - 1, i, DType::i32)));
      for (int q = 0; q < ranks; ++q) {
        ASSERT_EQ(g[q * count + i],
                  static_cast<float>(testing::collective_value(q, i, DType::bf16)))
            << "all_gather block " << q << " element " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GlooCollectivesTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(0, 1, 7, 1009, 300'001)),
                         [](const auto& param_info) {
                           return std::to_string(std::get<0>(param_info.param)) + "ranks_" +
                                  std::to_string(std::get<1>(param_info.param));
                         });

// Runs `body` on every rank and returns each rank's error message ("" when
// it returned normally).
std::vector<std::string> rank_errors(int ranks, const std::function<void(int)>& body) {
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  run_ranks(ranks, [&](int r) {
    try {
      body(r);
    } catch (const Error& e) {
      errors[r] = e.what();
    }
  });
  return errors;
}

TEST(Gloo, MismatchedCallsFailOnEveryRank) {
  StoreServer server;
  const std::string prefix = next_prefix();
  const auto errors = rank_errors(3, [&](int r) {
    auto comm = member(server, prefix, r, 3);
    Tensor t = Tensor::zeros(Shape{r == 1 ? 5 : 4}, DType::f32);
    comm->all_reduce(t, ReduceOp::sum);
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("element count differs"), std::string::npos) << e;
}

TEST(Gloo, AnInvalidCallWithoutTheCheckBreaksTheGroup) {
  // Without verify_calls the invalid rank's check all-reduce (12 int64s,
  // 96 bytes) was paired with the peers' real one: 24 floats, the same
  // bytes, "succeeded" there with the check's numbers as data.
  StoreServer server;
  const std::string prefix = next_prefix();
  const auto errors = rank_errors(3, [&](int r) {
    auto comm = member(server, prefix, r, 3, {.verify_calls = false});
    Tensor in = Tensor::full(Shape{24}, 1.0f, DType::f32);
    Tensor out = Tensor::zeros(Shape{r == 0 ? 23 : 24}, DType::f32);
    comm->all_reduce(in, out, ReduceOp::sum);
  });
  EXPECT_NE(errors[0].find("23"), std::string::npos) << errors[0];
  for (int r : {1, 2}) EXPECT_NE(errors[r].find("rank 0: "), std::string::npos) << errors[r];
}

TEST(Gloo, AbortReachesEveryWaitingRankWithItsReason) {
  StoreServer server;
  const std::string prefix = next_prefix();
  const auto start = std::chrono::steady_clock::now();
  const auto errors = rank_errors(3, [&](int r) {
    auto comm = member(server, prefix, r, 3);
    Tensor t = Tensor::zeros(Shape{10}, DType::f32);
    comm->all_reduce(t, ReduceOp::sum);  // a working group first
    if (r == 1) {
      std::this_thread::sleep_for(200ms);
      comm->abort("the loss became NaN");
      return;
    }
    comm->all_reduce(t, ReduceOp::sum);
  });
  EXPECT_EQ(errors[1], "");
  for (int r : {0, 2}) {
    EXPECT_NE(errors[r].find("rank 1: the loss became NaN"), std::string::npos) << errors[r];
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
}

TEST(Gloo, AbortFromAnotherThreadEndsThisRanksOwnWait) {
  StoreServer server;
  const std::string prefix = next_prefix();
  std::atomic<Communicator*> rank0{nullptr};
  std::atomic<bool> rank0_failed{false};
  const auto errors = rank_errors(2, [&](int r) {
    auto comm = member(server, prefix, r, 2);
    Tensor t = Tensor::zeros(Shape{10}, DType::f32);
    if (r == 0) {
      rank0 = comm.get();
      try {
        comm->all_reduce(t, ReduceOp::sum);  // rank 1 never comes
      } catch (...) {
        rank0_failed = true;
        throw;
      }
      return;
    }
    while (rank0.load() == nullptr) std::this_thread::sleep_for(10ms);
    std::this_thread::sleep_for(300ms);
    const auto start = std::chrono::steady_clock::now();
    rank0.load()->abort("stopping");
    while (!rank0_failed.load()) {
      ASSERT_LT(std::chrono::steady_clock::now() - start, 3s) << "rank 0 still waits";
      std::this_thread::sleep_for(10ms);
    }
  });
  EXPECT_NE(errors[0].find("stopping"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[1], "");
}

TEST(Gloo, APeerThatGoesAwayFailsTheOthersAtOnce) {
  StoreServer server;
  const std::string prefix = next_prefix();
  const auto start = std::chrono::steady_clock::now();
  const auto errors = rank_errors(3, [&](int r) {
    auto comm = member(server, prefix, r, 3);
    Tensor t = Tensor::zeros(Shape{1000}, DType::f32);
    comm->all_reduce(t, ReduceOp::sum);
    if (r == 2) return;  // its communicator closes, as a process that ends
    comm->all_reduce(t, ReduceOp::sum);
  });
  for (int r : {0, 1})
    EXPECT_NE(errors[r].find("closed its connection"), std::string::npos) << errors[r];
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  // A new group over the survivors, under a new prefix, works.
  const std::string again = next_prefix();
  run_ranks(2, [&](int r) {
    auto comm = member(server, again, r, 2);
    Tensor t = Tensor::full(Shape{3}, 1.0f, DType::f32);
    comm->all_reduce(t, ReduceOp::sum);
    EXPECT_EQ(t.to_floats()[0], 2.0f);
  });
}

TEST(Gloo, ASilentPeerEndsTheWaitAtTheTimeout) {
  StoreServer server;
  const std::string prefix = next_prefix();
  const CommOptions options{.timeout = 1s};
  std::atomic<bool> done{false};
  const auto errors = rank_errors(2, [&](int r) {
    auto comm = member(server, prefix, r, 2, options);
    Tensor t = Tensor::zeros(Shape{10}, DType::f32);
    if (r == 1) {
      while (!done.load()) std::this_thread::sleep_for(10ms);  // alive, never calls
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      comm->all_reduce(t, ReduceOp::sum);
    } catch (...) {
      done = true;
      EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
      throw;
    }
  });
  EXPECT_NE(errors[0].find("did not take part within 1000 ms"), std::string::npos) << errors[0];
}

TEST(Gloo, AGroupThatNeverAssemblesTimesOut) {
  StoreServer server;
  try {
    member(server, next_prefix(), 0, 2, {.timeout = 500ms});
    FAIL() << "expected Timeout";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("did not assemble"), std::string::npos) << e.what();
  }
}

TEST(Gloo, BadRanksAreRefused) {
  StoreServer server;
  EXPECT_THROW(member(server, next_prefix(), 2, 2), InvalidArgument);
  EXPECT_THROW(member(server, next_prefix(), -1, 2), InvalidArgument);
  EXPECT_THROW(make_gloo_communicator(nullptr, "p", 0, 1), InvalidArgument);
}

}  // namespace
}  // namespace tandem::comm
