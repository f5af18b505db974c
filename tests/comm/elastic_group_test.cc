// Elastic membership over gloo (threads of this process as members, each
// with its own connections): a member that leaves, dies without a word, or
// falls silent is dropped and the survivors go on in a new generation; a
// joiner is taken in at a step boundary; too few members end the job; a
// member the others gave up learns it.
#include "tandem/comm/elastic_group.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "support/ranks.h"
#include "tandem/base/error.h"
#include "tandem/comm/store.h"

namespace tandem::comm {
namespace {

using namespace std::chrono_literals;
using testing::run_ranks;

const ElasticOptions kOptions{
    .comm = {.timeout = 20s}, .heartbeat_every = 100ms, .peer_timeout = 1s};

std::string next_prefix() {
  static std::atomic<int> jobs{0};
  return "elastic" + std::to_string(jobs++);
}

// The sum over the group's ranks of 1.
float count_members(ElasticGroup& g) {
  Tensor t = Tensor::full(Shape{4}, 1.0f, DType::f32);
  g.communicator().all_reduce(t, ReduceOp::sum);
  return t.to_floats()[0];
}

// Survivors: a collective that fails makes them regroup; returns the
// membership they went on with.
Membership survive(ElasticGroup& g) {
  try {
    count_members(g);
    ADD_FAILURE() << "member " << g.id() << ": the collective with a lost member succeeded";
  } catch (const PeerFailed&) {
  }
  const Membership m = g.regroup();
  EXPECT_EQ(count_members(g), static_cast<float>(m.members.size()));
  return m;
}

TEST(ElasticGroup, AMemberThatLeavesIsDroppedAndTheOthersGoOn) {
  StoreServer server;
  const std::string prefix = next_prefix();
  std::vector<Membership> after(3);
  run_ranks(3, [&](int id) {
    auto g = ElasticGroup::start("127.0.0.1", server.port(), prefix, id, 3, kOptions);
    EXPECT_EQ(count_members(*g), 3.0f);
    if (id == 2) return;  // leaves (its destructor says so)
    after[id] = survive(*g);
  });
  for (int id : {0, 1}) {
    EXPECT_EQ(after[id].members, (std::vector<int>{0, 1}));
    EXPECT_EQ(after[id].rank, id);
    EXPECT_EQ(after[id].generation, 1);
  }
}

TEST(ElasticGroup, AMemberThatDiesWithoutAWordIsGivenUpAfterThePeerTimeout) {
  StoreServer server;
  const std::string prefix = next_prefix();
  std::atomic<int> regrouped{0};
  std::vector<Membership> after(3);
  run_ranks(3, [&](int id) {
    auto g = ElasticGroup::start("127.0.0.1", server.port(), prefix, id, 3, kOptions);
    EXPECT_EQ(count_members(*g), 3.0f);
    if (id == 1) {
      // As a killed process: its connections close, its heartbeats stop,
      // nothing marks it lost.
      g->stop_heartbeats_for_test();
      g->communicator().abort("killed");
      while (regrouped.load() < 2) std::this_thread::sleep_for(10ms);
      return;
    }
    after[id] = survive(*g);
    ++regrouped;
  });
  EXPECT_EQ(after[0].members, (std::vector<int>{0, 2}));
  EXPECT_EQ(after[2].rank, 1);
}

TEST(ElasticGroup, ASilentMemberIsGivenUpByItsHeartbeatWhileTheOthersWait) {
  StoreServer server;
  const std::string prefix = next_prefix();
  std::atomic<int> regrouped{0};
  run_ranks(3, [&](int id) {
    auto g = ElasticGroup::start("127.0.0.1", server.port(), prefix, id, 3, kOptions);
    EXPECT_EQ(count_members(*g), 3.0f);
    if (id == 0) {
      // Stopped, or its host cut off: alive, silent, in no collective.
      g->stop_heartbeats_for_test();
      while (regrouped.load() < 2) std::this_thread::sleep_for(10ms);
      // It learns that it was given up when it tries to go on.
      EXPECT_THROW(g->regroup(), PeerFailed);
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    const Membership m = survive(*g);  // the all-reduce waits for member 0 until given up
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
    EXPECT_EQ(m.members, (std::vector<int>{1, 2}));
    ++regrouped;
  });
}

TEST(ElasticGroup, AJoinerIsTakenInAtAStepBoundary) {
  StoreServer server;
  const std::string prefix = next_prefix();
  std::atomic<bool> started{false};
  run_ranks(3, [&](int thread) {
    if (thread == 2) {
      while (!started.load()) std::this_thread::sleep_for(10ms);
      auto g = ElasticGroup::join("127.0.0.1", server.port(), prefix, kOptions);
      EXPECT_EQ(g->id(), 2);
      EXPECT_EQ(g->membership().members, (std::vector<int>{0, 1, 2}));
      EXPECT_EQ(count_members(*g), 3.0f);
      return;
    }
    auto g = ElasticGroup::start("127.0.0.1", server.port(), prefix, thread, 2, kOptions);
    started = true;
    // Steps: every member asks whether a joiner waits and acts on the
    // answer together (an all-reduce of it).
    for (int step = 0; g->membership().members.size() < 3; ++step) {
      ASSERT_LT(step, 10'000) << "the joiner was never taken in";
      Tensor waiting = Tensor::full(Shape{1}, g->joiners_waiting() ? 1.0f : 0.0f, DType::f32);
      g->communicator().all_reduce(waiting, ReduceOp::max);
      if (waiting.to_floats()[0] > 0) g->regroup();
      std::this_thread::sleep_for(5ms);
    }
    EXPECT_EQ(count_members(*g), 3.0f);
  });
}

TEST(ElasticGroup, AJoinerArrivingDuringARegroupIsTakenInByTheNext) {
  // The second joiner takes its id while the decider waits on the first
  // one's heartbeat: the members used to count it as known once the
  // generation formed, and never asked about it again.
  StoreServer server;
  const std::string prefix = next_prefix();
  std::atomic<bool> started{false}, regrouping{false};
  ElasticOptions joining = kOptions;
  joining.join_timeout = 20s;
  // Steps until all three are members: each asks whether a joiner waits,
  // and they act on the answer together.
  const auto steps = [&](ElasticGroup& g) {
    for (int step = 0; g.membership().members.size() < 3; ++step) {
      if (step == 2'000) {
        ADD_FAILURE() << "member " << g.id() << ": a joiner was never taken in";
        return;
      }
      Tensor waiting = Tensor::full(Shape{1}, g.joiners_waiting() ? 1.0f : 0.0f, DType::f32);
      g.communicator().all_reduce(waiting, ReduceOp::max);
      if (waiting.to_floats()[0] > 0) {
        regrouping = true;
        g.regroup();
      }
      std::this_thread::sleep_for(5ms);
    }
    EXPECT_EQ(g.membership().members, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(count_members(g), 3.0f);
  };
  run_ranks(3, [&](int thread) {
    try {
      if (thread == 0) {
        auto g = ElasticGroup::start("127.0.0.1", server.port(), prefix, 0, 1, kOptions);
        started = true;
        steps(*g);
        return;
      }
      if (thread == 1) {
        while (!started.load()) std::this_thread::sleep_for(10ms);
      } else {
        while (!regrouping.load()) std::this_thread::sleep_for(1ms);
        std::this_thread::sleep_for(100ms);  // inside the decider's 300 ms wait
      }
      auto g = ElasticGroup::join("127.0.0.1", server.port(), prefix, joining);
      steps(*g);
    } catch (const Error& e) {
      ADD_FAILURE() << "thread " << thread << ": " << e.what();
    }
  });
}

TEST(ElasticGroup, ADeciderLostWhileDecidingCostsThePeerTimeout) {
  // Generation 1's decider (id 7 here) claims the decision, then falls
  // silent: the members waited for its decision the whole decision timeout
  // (20 s + 1 s + 10 s here) before trying generation 2.
  StoreServer server;
  const std::string prefix = next_prefix();
  auto store = connect_store("127.0.0.1", server.port(), 5s, 5s);
  store->add(prefix + "/elastic/gen/1/decider", 1);
  store->set(prefix + "/elastic/gen/1/decider_id", "7");
  std::vector<Membership> after(2);
  std::vector<double> seconds(2);
  run_ranks(2, [&](int id) {
    auto g = ElasticGroup::start("127.0.0.1", server.port(), prefix, id, 2, kOptions);
    EXPECT_EQ(count_members(*g), 2.0f);
    const auto start = std::chrono::steady_clock::now();
    after[id] = g->regroup();
    seconds[id] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(count_members(*g), 2.0f);
  });
  for (int id : {0, 1}) {
    EXPECT_EQ(after[id].generation, 2);
    EXPECT_EQ(after[id].members, (std::vector<int>{0, 1}));
    EXPECT_LT(seconds[id], 10.0) << "member " << id;
  }
}

TEST(ElasticGroup, AJoinerWaitsForTheJobToStart) {
  // A joiner that came first took id 0 (member 0 had not set the first
  // free id yet), hid member 0's heartbeat and was never taken in.
  StoreServer server;
  const std::string prefix = next_prefix();
  std::unique_ptr<ElasticGroup> joiner;
  std::thread early(
      [&] { joiner = ElasticGroup::join("127.0.0.1", server.port(), prefix, kOptions); });
  std::this_thread::sleep_for(300ms);
  auto store = connect_store("127.0.0.1", server.port(), 5s, 5s);
  EXPECT_FALSE(store->try_get(prefix + "/elastic/joining/0").has_value());
  auto member = ElasticGroup::start("127.0.0.1", server.port(), prefix, 0, 1, kOptions);
  for (int step = 0; member->membership().members.size() < 2; ++step) {
    ASSERT_LT(step, 2'000) << "the joiner was never taken in";
    if (member->joiners_waiting()) member->regroup();
    std::this_thread::sleep_for(5ms);
  }
  early.join();
  ASSERT_NE(joiner, nullptr);
  EXPECT_EQ(joiner->id(), 1);
  EXPECT_EQ(member->membership().members, (std::vector<int>{0, 1}));
  // A job that never starts is a clear Timeout.
  ElasticOptions brief = kOptions;
  brief.join_timeout = 300ms;
  try {
    ElasticGroup::join("127.0.0.1", server.port(), next_prefix(), brief);
    ADD_FAILURE() << "joined a job that does not exist";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("its member 0 never started"), std::string::npos)
        << e.what();
  }
}

TEST(ElasticGroup, FewerMembersThanTheMinimumEndTheJob) {
  StoreServer server;
  const std::string prefix = next_prefix();
  ElasticOptions options = kOptions;
  options.min_members = 3;
  run_ranks(3, [&](int id) {
    auto g = ElasticGroup::start("127.0.0.1", server.port(), prefix, id, 3, options);
    EXPECT_EQ(count_members(*g), 3.0f);
    if (id == 2) return;
    EXPECT_THROW(count_members(*g), PeerFailed);
    try {
      g->regroup();
      ADD_FAILURE() << "regroup below min_members succeeded";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("only 2 member(s) left"), std::string::npos) << e.what();
    }
  });
}

TEST(ElasticGroup, BadMembersAreRefused) {
  StoreServer server;
  EXPECT_THROW(ElasticGroup::start("127.0.0.1", server.port(), next_prefix(), 3, 3, kOptions),
               InvalidArgument);
  ElasticOptions none = kOptions;
  none.min_members = 0;
  EXPECT_THROW(ElasticGroup::start("127.0.0.1", server.port(), next_prefix(), 0, 1, none),
               InvalidArgument);
  // Heartbeats that could not keep a live member within the peer timeout.
  for (const std::chrono::milliseconds beat : {0ms, -5ms, 600ms, 2000ms}) {
    ElasticOptions slow = kOptions;
    slow.heartbeat_every = beat;
    EXPECT_THROW(ElasticGroup::start("127.0.0.1", server.port(), next_prefix(), 0, 1, slow),
                 InvalidArgument)
        << beat.count() << " ms";
  }
}

}  // namespace
}  // namespace tandem::comm
