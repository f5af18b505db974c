// distribute::broadcast_state: how an elastic job's members take rank 0's
// training state (docs/distributed.md).
#include "tandem/distribute/state_broadcast.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "support/ranks.h"
#include "tandem/base/error.h"
#include "tandem/comm/inprocess.h"

namespace tandem {
namespace {

distribute::EngineState sample_state() {
  distribute::EngineState state;
  state.metadata = {{"loss_scale", "1024"}, {"trainer.position", "{\"step\": 7}"}};
  state.tensors.emplace_back(
      "model.w", Tensor::from_floats(Shape{2, 3}, std::vector<float>{1, -2, 3, 4.5f, 5, 6}));
  state.tensors.emplace_back("optimizer.count",
                             Tensor::from_ints(Shape{1}, std::vector<int32_t>{9}));
  state.tensors.emplace_back("model.empty", Tensor::zeros(Shape{0, 4}));
  state.tensors.emplace_back("buffer.half", Tensor::full(Shape{3}, 0.5f, DType::bf16));
  return state;
}

TEST(StateBroadcast, EveryRankGetsRankZerosStateBitForBit) {
  const distribute::EngineState sent = sample_state();
  for (int ranks : {1, 2, 3, 5}) {
    comm::InProcessGroup group(ranks);
    std::vector<distribute::EngineState> got(static_cast<size_t>(ranks));
    testing::run_ranks(ranks, [&](int r) {
      auto comm = group.communicator(r);
      // The other ranks' own states are ignored.
      distribute::EngineState mine;
      got[r] = distribute::broadcast_state(*comm, r == 0 ? &sent : (r % 2 ? &mine : nullptr));
    });
    for (const distribute::EngineState& state : got) {
      EXPECT_EQ(state.metadata, sent.metadata);
      ASSERT_EQ(state.tensors.size(), sent.tensors.size());
      for (size_t i = 0; i < sent.tensors.size(); ++i) {
        const auto& [name, t] = sent.tensors[i];
        EXPECT_EQ(state.tensors[i].first, name);
        EXPECT_EQ(state.tensors[i].second.shape(), t.shape()) << name;
        EXPECT_EQ(state.tensors[i].second.dtype(), t.dtype()) << name;
        EXPECT_EQ(std::memcmp(state.tensors[i].second.raw_data(), t.raw_data(), t.nbytes()), 0)
            << name;
      }
    }
  }
}

TEST(StateBroadcast, ARankZeroWithoutStateFailsEveryRank) {
  comm::InProcessGroup group(3);
  std::vector<std::string> errors(3);
  const distribute::EngineState mine = sample_state();
  testing::run_ranks(3, [&](int r) {
    auto comm = group.communicator(r);
    try {
      distribute::broadcast_state(*comm, r == 0 ? nullptr : &mine);
    } catch (const CommError& e) {
      errors[r] = e.what();
    }
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("rank 0 of the new group has no training state"), std::string::npos) << e;
}

TEST(StateBroadcast, TheCopyIsDeepAndSavedStatesAreNot) {
  const distribute::EngineState live = sample_state();
  const distribute::EngineState copy = distribute::copy_state(live);
  live.tensors[0].second.data<float>()[0] = 100.0f;
  EXPECT_EQ(copy.tensors[0].second.to_floats()[0], 1.0f);
  EXPECT_EQ(copy.metadata, live.metadata);
}

}  // namespace
}  // namespace tandem
