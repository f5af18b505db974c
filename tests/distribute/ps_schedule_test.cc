// The parameter server's schedule (detail/ps_schedule.h) driven by scripted
// arrivals, without threads: bounded staleness holds whatever order the
// workers finish in, synchronous rounds wait for their workers less the
// backup workers and drop the late, a share waits for its round, a lost
// worker's shares go to another worker or are dropped, and a round with an
// overflow is rejected without an update.
#include "tandem/distribute/detail/ps_schedule.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "tandem/base/error.h"

namespace tandem::distribute::detail {
namespace {

using Kind = ParameterServerSchedule::Next::Kind;

data::Element batch(int64_t rows) {
  return data::Element{{"x", Tensor::zeros(Shape{rows, 1}, DType::f32)}};
}

void hand_out(ParameterServerSchedule& s, int64_t rows, std::optional<double> lr = std::nullopt) {
  s.hand_out(batch(rows), /*step=*/0, rows, lr, nullptr);
}

int64_t total(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

// Asynchronous workers finishing in a random order: no applied gradient is
// staler than the bound, a worker the bound holds back waits (and is let
// in once the others land), and every share is computed exactly once.
TEST(ParameterServerSchedule, NoGradientExceedsTheStalenessBoundInAnyOrder) {
  for (const int64_t bound : {1, 2, 3}) {
    for (unsigned seed = 0; seed < 20; ++seed) {
      constexpr int kWorkers = 4, kBatches = 30;
      ParameterServerSchedule s(kWorkers, bound, 0);
      for (int b = 0; b < kBatches; ++b) hand_out(s, kWorkers);
      std::mt19937 random(seed);
      std::vector<bool> computing(kWorkers, false);
      int64_t computed = 0, held_back = 0;
      for (int moves = 0; computed < kWorkers * kBatches; ++moves) {
        ASSERT_LT(moves, 100000) << "the schedule stopped making progress";
        const int r = static_cast<int>(random() % kWorkers);
        if (computing[r]) {
          const int64_t staleness = s.arrive_asynchronous(r, true);
          EXPECT_LE(staleness, bound) << "seed " << seed;
          computing[r] = false;
          ++computed;
          continue;
        }
        const ParameterServerSchedule::Next next = s.next(r, /*closing=*/false);
        if (next.kind == Kind::compute) {
          EXPECT_EQ(*s.computing_on(r), s.version());
          computing[r] = true;
        } else {
          ASSERT_EQ(next.kind, Kind::wait);
          // With more shares queued than workers, only the bound holds it back.
          if (!s.has_room()) held_back += 1;
        }
      }
      EXPECT_EQ(s.version(), kWorkers * kBatches);
      EXPECT_GT(held_back, 0) << "the bound never held a worker back: the test shows nothing";
      const std::vector<int64_t> staleness = s.take_staleness();
      EXPECT_LE(staleness.size(), static_cast<size_t>(bound) + 1);
      EXPECT_EQ(total(staleness), kWorkers * kBatches);
      EXPECT_EQ(s.next(0, /*closing=*/true).kind, Kind::stop);
    }
  }
}

TEST(ParameterServerSchedule, AsynchronousSharesWithoutRowsAreSkipped) {
  ParameterServerSchedule s(3, std::nullopt, 0);
  hand_out(s, 2);  // shares of 1, 1 and 0 rows
  EXPECT_EQ(s.next(0, false).kind, Kind::compute);
  EXPECT_EQ(s.next(1, false).kind, Kind::compute);
  const ParameterServerSchedule::Next last = s.next(2, false);
  EXPECT_EQ(last.kind, Kind::wait);
  EXPECT_TRUE(last.changed);  // it took the empty share off the queue
  EXPECT_EQ(s.next(2, true).kind, Kind::stop);
}

TEST(ParameterServerSchedule, HasRoomWhileTheFirstFreeWorkerWouldFindWork) {
  ParameterServerSchedule s(2, std::nullopt, 0);
  EXPECT_TRUE(s.has_room());
  hand_out(s, 2);
  EXPECT_TRUE(s.has_room());  // 2 shares for 2 workers
  hand_out(s, 2);
  EXPECT_FALSE(s.has_room());
  s.next(0, false);
  s.next(1, false);
  EXPECT_TRUE(s.has_room());

  ParameterServerSchedule sync(2, int64_t{0}, 0);
  hand_out(sync, 2);
  hand_out(sync, 2);
  EXPECT_FALSE(sync.has_room());  // each worker has 2 shares queued
  sync.next(0, false);
  EXPECT_TRUE(sync.has_room());
}

// A fast worker's next share waits until its round starts; the round
// completes with every worker and is the mean over the whole batch.
TEST(ParameterServerSchedule, ASynchronousShareWaitsForItsRound) {
  ParameterServerSchedule s(2, int64_t{0}, 0);
  hand_out(s, 4, 0.5);
  hand_out(s, 4, 0.25);
  ParameterServerSchedule::Next a = s.next(0, false), b = s.next(1, false);
  ASSERT_EQ(a.kind, Kind::compute);
  ASSERT_EQ(b.kind, Kind::compute);
  EXPECT_EQ(a.share->round, 0);
  EXPECT_TRUE(s.arrive_in_round(0, *a.share, 2, true, {0, 1}).first);
  EXPECT_FALSE(s.complete_round());  // worker 1's gradient is missing
  EXPECT_EQ(s.next(0, false).kind, Kind::wait) << "round 1 started before round 0 was applied";
  EXPECT_FALSE(s.arrive_in_round(1, *b.share, 2, true, {1, 1}).first);
  const auto round = s.complete_round();
  ASSERT_TRUE(round);
  EXPECT_TRUE(round->apply);
  EXPECT_EQ(round->factor, 1.0f);
  EXPECT_EQ(round->learning_rate, 0.5);
  EXPECT_EQ(round->update.sources.size(), 2u);
  EXPECT_EQ(s.version(), 1);
  const ParameterServerSchedule::Next next = s.next(0, false);
  ASSERT_EQ(next.kind, Kind::compute);
  EXPECT_EQ(next.share->round, 1);
  EXPECT_EQ(next.share->learning_rate, 0.25);
  EXPECT_EQ(s.take_updates().applied, 1);
  EXPECT_EQ(s.take_staleness(), std::vector<int64_t>{2});
}

// Backup workers: the round completes without the slowest, rescaled to the
// mean over the rows that arrived; the late gradient and the straggler's
// queued share of that round are dropped and counted.
TEST(ParameterServerSchedule, BackupWorkersCompleteTheRoundAndDropTheLate) {
  ParameterServerSchedule s(3, int64_t{0}, 1);
  hand_out(s, 6);
  hand_out(s, 6);
  ParameterServerSchedule::Next w0 = s.next(0, false), w1 = s.next(1, false), w2 = s.next(2, false);
  s.arrive_in_round(0, *w0.share, 2, true, {0, 1});
  s.arrive_in_round(1, *w1.share, 2, true, {1, 1});
  const auto round = s.complete_round();
  ASSERT_TRUE(round);
  EXPECT_FLOAT_EQ(round->factor, 1.5f);  // 6 rows in the batch, 4 arrived
  EXPECT_EQ(round->update.factor, 1.5);
  EXPECT_TRUE(s.arrive_in_round(2, *w2.share, 2, true, {2, 1}).late);
  // Round 1: the fast two again; the straggler's round-1 share is gone once
  // round 1 completes without it.
  w0 = s.next(0, false);
  w1 = s.next(1, false);
  s.arrive_in_round(0, *w0.share, 2, true, {0, 2});
  s.arrive_in_round(1, *w1.share, 2, true, {1, 2});
  ASSERT_TRUE(s.complete_round());
  EXPECT_EQ(s.next(2, true).kind, Kind::stop);
  EXPECT_EQ(s.take_dropped(), (std::vector<int64_t>{0, 0, 4}));
  EXPECT_EQ(s.take_dropped(), (std::vector<int64_t>{0, 0, 0}));  // taken
}

TEST(ParameterServerSchedule, ARoundWithAnOverflowIsRejectedAndStillAdvances) {
  ParameterServerSchedule s(2, int64_t{0}, 0);
  hand_out(s, 2);
  ParameterServerSchedule::Next a = s.next(0, false), b = s.next(1, false);
  s.arrive_in_round(0, *a.share, 1, true, {0, 1});
  s.arrive_in_round(1, *b.share, 1, false, {1, 1});
  const auto round = s.complete_round();
  ASSERT_TRUE(round);
  EXPECT_FALSE(round->apply);
  EXPECT_FALSE(round->finite);
  EXPECT_TRUE(round->update.sources.empty());
  EXPECT_EQ(round->update.discards.size(), 2u);  // the shard ranks drop both
  EXPECT_EQ(s.version(), 1);
  const ParameterServerSchedule::Updates updates = s.take_updates();
  EXPECT_EQ(updates.applied, 0);
  EXPECT_EQ(updates.rejected, 1);
}

TEST(ParameterServerSchedule, ALostAsynchronousWorkersShareGoesToAnother) {
  ParameterServerSchedule s(2, std::nullopt, 0);
  hand_out(s, 2);
  ParameterServerSchedule::Next a = s.next(0, false), b = s.next(1, false);
  s.arrive_asynchronous(1, true);
  EXPECT_FALSE(s.lose(0, a.share));
  EXPECT_EQ(s.live_workers(), 1);
  EXPECT_EQ(s.next(0, false).kind, Kind::stop);
  const ParameterServerSchedule::Next retaken = s.next(1, false);
  ASSERT_EQ(retaken.kind, Kind::compute);
  EXPECT_EQ(retaken.share->rows.features()[0].second.dim(0), 1);
  hand_out(s, 2);  // the one live worker gets the whole batch
  s.arrive_asynchronous(1, true);
  const ParameterServerSchedule::Next whole = s.next(1, false);
  ASSERT_EQ(whole.kind, Kind::compute);
  EXPECT_EQ(whole.share->rows.features()[0].second.dim(0), 2);
  EXPECT_EQ(total(s.take_dropped()), 0);
}

// A worker lost in the middle of a round: its shares are dropped, and the
// round that waited for it completes with the gradients that arrived.
TEST(ParameterServerSchedule, ALostSynchronousWorkerLetsItsRoundComplete) {
  ParameterServerSchedule s(3, int64_t{0}, 0);
  hand_out(s, 3);
  hand_out(s, 3);
  ParameterServerSchedule::Next w0 = s.next(0, false), w1 = s.next(1, false), w2 = s.next(2, false);
  s.arrive_in_round(0, *w0.share, 1, true, {0, 1});
  s.arrive_in_round(1, *w1.share, 1, true, {1, 1});
  EXPECT_FALSE(s.complete_round());
  EXPECT_TRUE(s.lose(2, w2.share));
  const auto round = s.complete_round();
  ASSERT_TRUE(round);
  EXPECT_FLOAT_EQ(round->factor, 1.5f);
  EXPECT_EQ(s.take_dropped(), (std::vector<int64_t>{0, 0, 2}));  // its share, its queue
}

TEST(ParameterServerSchedule, NonsenseIsRefused) {
  EXPECT_THROW(ParameterServerSchedule(0, std::nullopt, 0), InvalidArgument);
  ParameterServerSchedule s(1, std::nullopt, 0);
  EXPECT_THROW(s.arrive_asynchronous(0, true), Error);  // it computed nothing
  EXPECT_THROW(s.next(1, false), InvalidArgument);
}

}  // namespace
}  // namespace tandem::distribute::detail
