// MPI and hierarchical collectives. CTest runs this program under
// `mpirun -np 2` and `-np 3`; every process checks its own results.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "support/collective_values.h"
#include "support/ranks.h"
#include "tandem/base/error.h"
#include "tandem/comm/hierarchical.h"
#include "tandem/comm/launch.h"
#include "tandem/comm/mpi.h"

namespace tandem::comm {
namespace {

using testing::collective_input;
using testing::collective_reference;
using testing::collective_tolerance;
using testing::collective_value;

Communicator& world() {
  static std::unique_ptr<Communicator> comm = make_mpi_communicator();
  return *comm;
}

TEST(Mpi, LaunchedWithSeveralProcesses) {
  ASSERT_TRUE(mpi_built());
  ASSERT_TRUE(launched_by_mpi()) << "run under mpirun";
  EXPECT_GE(world().size(), 2);
  EXPECT_EQ(world().size(), mpi_world_size());
  EXPECT_EQ(world().rank(), mpi_world_rank());
  EXPECT_EQ(world().backend(), "mpi");
  EXPECT_EQ(world().all_reduce_algorithm(1 << 20), "MPI_Allreduce");
}

TEST(Mpi, AllReduceMatchesNaiveReduction) {
  Communicator& c = world();
  const int n = c.size(), r = c.rank();
  for (int64_t count : {0, 1, 2, 3, 31, 1009, (1 << 20) + 3}) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::i32}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min}) {
        if (dtype == DType::i32 && op == ReduceOp::mean) continue;
        for (bool in_place : {true, false}) {
          Tensor input = collective_input(r, count, dtype);
          Tensor output = in_place ? input : Tensor::zeros(Shape{count}, dtype);
          c.all_reduce(input, output, op);
          const std::vector<float> got = output.to_floats();
          for (int64_t i = 0; i < count; ++i) {
            const double expected = collective_reference(op, n, i, dtype);
            ASSERT_LE(std::abs(got[i] - expected), collective_tolerance(dtype, expected, n))
                << dtype_name(dtype) << " " << reduce_op_name(op) << " count " << count
                << " element " << i;
          }
        }
      }
    }
  }
}

TEST(Mpi, ReduceScatterAllGatherBroadcastBarrierAsync) {
  Communicator& c = world();
  const int n = c.size(), r = c.rank();
  // The reduce-scatter and all-gather are rings of messages (n - 1 steps).
  for (int64_t count : {0, 1, 1009, 65537}) {
    for (DType dtype : {DType::f32, DType::bf16, DType::i32}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::mean}) {
        if (op == ReduceOp::mean && dtype == DType::i32) continue;
        Tensor scattered = Tensor::zeros(Shape{count}, dtype);
        c.reduce_scatter(collective_input(r, count * n, dtype), scattered, op);
        const auto s = scattered.to_floats();
        for (int64_t i = 0; i < count; ++i) {
          const double expected = collective_reference(op, n, r * count + i, dtype);
          ASSERT_LE(std::abs(s[i] - expected), collective_tolerance(dtype, expected, n))
              << "count " << count << " element " << i;
        }
      }
      Tensor gathered = Tensor::zeros(Shape{count * n}, dtype);
      c.all_gather(collective_input(r, count, dtype), gathered);
      const auto g = gathered.to_floats();
      for (int j = 0; j < n; ++j) {
        for (int64_t i = 0; i < count; ++i)
          ASSERT_EQ(g[j * count + i], static_cast<float>(collective_value(j, i, dtype)));
      }
      Tensor b = collective_input(r, count, dtype);
      c.broadcast(b, n - 1);
      const auto bs = b.to_floats();
      for (int64_t i = 0; i < count; ++i)
        ASSERT_EQ(bs[i], static_cast<float>(collective_value(n - 1, i, dtype)));
    }
  }
  c.barrier();
  std::vector<Tensor> buffers;
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < 5; ++k) {
    buffers.push_back(Tensor::full(Shape{100 + k}, static_cast<float>(r + k)));
    works.push_back(c.all_reduce_async(buffers.back(), buffers.back(), ReduceOp::sum));
  }
  for (int k = 0; k < 5; ++k) {
    works[k]->wait();
    EXPECT_EQ(buffers[k].to_floats()[0], static_cast<float>(n * (n - 1) / 2 + n * k));
  }
}

TEST(Mpi, MismatchedAndInvalidCallsFailOnEveryRank) {
  Communicator& c = world();
  const int r = c.rank();
  EXPECT_THROW(c.all_reduce(Tensor::zeros(Shape{10 + r}), ReduceOp::sum), CommError);
  EXPECT_THROW(c.all_reduce(Tensor::zeros(Shape{10}), r == 0 ? ReduceOp::sum : ReduceOp::max),
               CommError);
  EXPECT_THROW(
      c.all_reduce(Tensor::zeros(Shape{10}), Tensor::zeros(Shape{r == 1 ? 9 : 10}), ReduceOp::sum),
      CommError);
  // Still in step afterwards.
  Tensor t = Tensor::full(Shape{4}, 1.0f);
  c.all_reduce(t, ReduceOp::sum);
  EXPECT_EQ(t.to_floats()[3], static_cast<float>(c.size()));
}

TEST(Mpi, ACollectiveTheFailedRankCompletedCompletesEverywhere) {
  // Rank 0 leaves a large all-reduce and fails at once: its abort notice
  // races the collective's last messages to the others. They must still
  // complete that all-reduce (rank 0 did) and refuse only the next call.
  // Rank 0 arrives late, so that the others wait in the slow phase of their
  // wait (tests 0.2 ms apart) and it is likely to finish first.
  const int n = mpi_world_size(), r = mpi_world_rank();
  constexpr int64_t kCount = (1 << 20) + 3;
  for (int round = 0; round < 10; ++round) {
    std::unique_ptr<Communicator> c = make_mpi_communicator({.timeout = std::chrono::seconds(60)});
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(150));
    Tensor buffer = collective_input(r, kCount, DType::f32);
    ASSERT_NO_THROW(c->all_reduce(buffer, ReduceOp::sum)) << "round " << round;
    if (r == 0) c->abort("rank 0 failed after the all-reduce");
    const std::vector<float> got = buffer.to_floats();
    for (int64_t i = 0; i < kCount; i += 4099) {
      const double expected = collective_reference(ReduceOp::sum, n, i, DType::f32);
      ASSERT_LE(std::abs(got[i] - expected), collective_tolerance(DType::f32, expected, n));
    }
    try {
      c->barrier();
      ADD_FAILURE() << "the barrier after the failure returned on rank " << r;
    } catch (const PeerFailed& e) {
      EXPECT_NE(std::string(e.what()).find("rank 0 failed"), std::string::npos) << e.what();
    }
  }
}

TEST(Hierarchical, TwoDevicesPerProcessActLikeOneGroup) {
  constexpr int kLocal = 2;
  HierarchicalGroup group(kLocal);
  const int processes = group.process_count();
  const int n = processes * kLocal;
  testing::run_ranks(kLocal, [&](int local) {
    auto c = group.communicator(local);
    const int r = c->rank();
    EXPECT_EQ(r, group.process_rank() * kLocal + local);
    EXPECT_EQ(c->size(), n);
    EXPECT_EQ(c->all_reduce_algorithm(4096), "local+MPI_Allreduce+broadcast");
    for (int64_t count : {1, 1009, 100003}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max}) {
        Tensor t = collective_input(r, count, DType::f32);
        c->all_reduce(t, op);
        const auto got = t.to_floats();
        for (int64_t i = 0; i < count; ++i) {
          const double expected = collective_reference(op, n, i, DType::f32);
          if (std::abs(got[i] - expected) > 1e-5 * std::max(1.0, std::abs(expected))) {
            TANDEM_THROW(Error, "hierarchical all_reduce rank ", r, " element ", i, ": ", got[i],
                         " vs ", expected);
          }
        }
      }
      Tensor gathered = Tensor::zeros(Shape{count * n});
      c->all_gather(collective_input(r, count, DType::f32), gathered);
      const auto g = gathered.to_floats();
      for (int j = 0; j < n; ++j) {
        for (int64_t i = 0; i < count; ++i) {
          if (g[j * count + i] != static_cast<float>(collective_value(j, i, DType::f32))) {
            TANDEM_THROW(Error, "hierarchical all_gather rank ", r, " segment ", j, " element ", i);
          }
        }
      }
      for (int root : {0, n - 1}) {
        Tensor b = collective_input(r, count, DType::f32);
        c->broadcast(b, root);
        const auto got_b = b.to_floats();
        for (int64_t i = 0; i < count; ++i) {
          if (got_b[i] != static_cast<float>(collective_value(root, i, DType::f32))) {
            TANDEM_THROW(Error, "hierarchical broadcast from ", root, " wrong on rank ", r,
                         " element ", i);
          }
        }
      }
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max}) {
        Tensor scattered = Tensor::zeros(Shape{count});
        c->reduce_scatter(collective_input(r, count * n, DType::f32), scattered, op);
        const auto got_s = scattered.to_floats();
        for (int64_t i = 0; i < count; ++i) {
          const double expected = collective_reference(op, n, r * count + i, DType::f32);
          if (std::abs(got_s[i] - expected) > 1e-5 * std::max(1.0, std::abs(expected))) {
            TANDEM_THROW(Error, "hierarchical reduce_scatter wrong on rank ", r, " element ", i,
                         ": ", got_s[i], " vs ", expected);
          }
        }
      }
      c->barrier();
    }
  });
}

TEST(Hierarchical, AnInvalidCallOnOneRankFailsOnEveryRankAtOnce) {
  // The other ranks wait for the invalid one inside the process and across
  // processes; with a one-minute deadline only breaking the group ends them.
  constexpr int kLocal = 2;
  HierarchicalGroup group(kLocal, {.timeout = std::chrono::seconds(60)});
  const auto start = std::chrono::steady_clock::now();
  std::atomic<int> failed{0};
  testing::run_ranks(kLocal, [&](int local) {
    auto c = group.communicator(local);
    const bool invalid = c->rank() == 1;
    try {
      c->all_reduce(Tensor::zeros(Shape{10}), Tensor::zeros(Shape{invalid ? 9 : 10}),
                    ReduceOp::sum);
    } catch (const CommError& e) {
      if (!invalid && std::string(e.what()).find("rank 1: invalid all_reduce") == std::string::npos)
        ADD_FAILURE() << "rank " << c->rank() << ": " << e.what();
      ++failed;
    }
  });
  EXPECT_EQ(failed.load(), kLocal);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace tandem::comm
