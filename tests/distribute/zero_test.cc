// ZeRO stages 1 and 2 and gradient accumulation, by equivalence: sharding
// the optimizer state and the gradients, or splitting a step into
// micro-batches, gives the parameters that plain replicated training gives,
// and each replica holds 1/N of what is sharded (allocator categories).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "support/model_batches.h"
#include "support/ranks.h"
#include "support/reference.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/comm/inprocess.h"
#include "tandem/distribute/reducer.h"
#include "tandem/distribute/sharded_optimizer.h"
#include "tandem/distribute/strategy.h"
#include "tandem/nn/activation.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/sequential.h"
#include "tandem/tensor/allocator.h"

namespace tandem {
namespace {

using testing::relative_error;

std::unique_ptr<distribute::Strategy> strategy_of(int devices) {
  if (devices == 1)
    return distribute::make_strategy(
        {.kind = distribute::StrategyKind::one_device, .threads_per_device = 1});
  return distribute::make_strategy({.kind = distribute::StrategyKind::mirrored,
                                    .devices = devices,
                                    .threads_per_device = 1,
                                    .allow_oversubscription = true});
}

// Odd sizes, so that buckets need padding for every replica count.
std::shared_ptr<nn::Module> model() {
  Generator g(11);
  auto m = std::make_shared<nn::Sequential>();
  m->emplace<nn::Linear>(5, 23, nn::LinearOptions{}, g)
      .emplace<nn::SiLU>()
      .emplace<nn::Linear>(23, 13, nn::LinearOptions{}, g)
      .emplace<nn::SiLU>()
      .emplace<nn::Linear>(13, 1, nn::LinearOptions{}, g);
  return m;
}

data::Element batch_of(int64_t rows, uint64_t seed) {
  return testing::regression_batch(rows, 5, seed);
}

// Squared error per example.
constexpr auto forward = &testing::squared_error_loss;

optim::OptimizerConfig optimizer_of(const std::string& name, double clip = 0.0) {
  if (name == "sgd") {
    return {.kind = optim::OptimizerKind::sgd,
            .learning_rate = 0.05,
            .momentum = 0.9,
            .global_clip_norm = clip};
  }
  return {.kind = optim::OptimizerKind::adamw,
          .learning_rate = 0.01,
          .weight_decay = 0.1,
          .global_clip_norm = clip};
}

// Tiny buckets (several per model, padded): 64 and 256 bytes.
distribute::ReducerOptions reducer_of(int stage) {
  return {.bucket_bytes = 256, .first_bucket_bytes = 64, .zero_stage = stage};
}

void expect_same_parameters(distribute::Engine& a, distribute::Engine& b, double tolerance,
                            const std::string& what) {
  for (int r = 0; r < b.strategy().local_replicas(); ++r) {
    const auto pa = a.model().named_parameters();
    const auto pb = b.model(r).named_parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_LE(relative_error(pb[i].second.value().to_floats(), pa[i].second.value().to_floats()),
                tolerance)
          << what << ": replica " << r << ", " << pa[i].first;
    }
  }
}

struct ZeroCase {
  int stage;
  int devices;
  std::string optimizer;
  bool clip_and_scale;  // global-norm clipping and a (fixed) loss scale
};

class ZeroEquivalence : public ::testing::TestWithParam<ZeroCase> {};

TEST_P(ZeroEquivalence, ShardedTrainingMatchesReplicatedTraining) {
  const ZeroCase c = GetParam();
  auto plain_strategy = strategy_of(c.devices);
  auto zero_strategy = strategy_of(c.devices);
  distribute::EngineOptions options{
      .optimizer = optimizer_of(c.optimizer, c.clip_and_scale ? 0.5 : 0.0),
      .reducer = reducer_of(0)};
  if (c.clip_and_scale)
    options.loss_scale = precision::LossScalerOptions{.dynamic = false, .initial_scale = 1024};
  auto plain = plain_strategy->make_engine(model, options);
  options.reducer = reducer_of(c.stage);
  auto zero = zero_strategy->make_engine(model, options);
  EXPECT_EQ(zero->name(), "zero" + std::to_string(c.stage));
  for (int64_t step = 0; step < 6; ++step) {
    // 17 rows: uneven shares; the last step has fewer rows than replicas.
    const data::Element batch = batch_of(step == 5 ? 2 : 17, 40 + static_cast<uint64_t>(step));
    const distribute::StepResult a = plain->step(batch, forward, {.step = step});
    const distribute::StepResult b = zero->step(batch, forward, {.step = step});
    EXPECT_NEAR(a.loss, b.loss, 1e-6 * std::max(1.0, std::abs(a.loss))) << "step " << step;
    if (c.clip_and_scale) {
      EXPECT_NEAR(a.gradient_norm, b.gradient_norm, 1e-6 * a.gradient_norm) << "step " << step;
    }
    expect_same_parameters(*plain, *zero, 1e-6, "step " + std::to_string(step));
  }
}

std::vector<ZeroCase> zero_cases() {
  std::vector<ZeroCase> out;
  for (int stage : {1, 2})
    for (int devices : {2, 3, 4})
      for (const char* opt : {"sgd", "adamw"}) out.push_back({stage, devices, opt, false});
  out.push_back({1, 3, "adamw", true});
  out.push_back({2, 3, "adamw", true});
  out.push_back({2, 2, "sgd", true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroEquivalence, ::testing::ValuesIn(zero_cases()),
                         [](const ::testing::TestParamInfo<ZeroCase>& p) {
                           const ZeroCase& c = p.param;
                           return "zero" + std::to_string(c.stage) + "_" +
                                  std::to_string(c.devices) + "devices_" + c.optimizer +
                                  (c.clip_and_scale ? "_clipped_scaled" : "");
                         });

// The byte counts of one category on each replica's device, now and at peak.
struct Bytes {
  std::vector<int64_t> current, peak;
};
Bytes bytes_on_devices(int devices, MemoryCategory category) {
  Bytes out;
  for (int d = 0; d < devices; ++d) {
    const MemoryStats s = allocator_for(cpu_device(d)).stats();
    out.current.push_back(s.current(category));
    out.peak.push_back(s.peak(category));
  }
  return out;
}

// A model large enough that padding and the staged buckets are small beside it.
std::shared_ptr<nn::Module> wide_model() {
  Generator g(5);
  auto m = std::make_shared<nn::Sequential>();
  m->emplace<nn::Linear>(5, 256, nn::LinearOptions{}, g)
      .emplace<nn::SiLU>()
      .emplace<nn::Linear>(256, 256, nn::LinearOptions{}, g)
      .emplace<nn::SiLU>()
      .emplace<nn::Linear>(256, 256, nn::LinearOptions{}, g)
      .emplace<nn::SiLU>()
      .emplace<nn::Linear>(256, 1, nn::LinearOptions{}, g);
  return m;
}

TEST(Zero, EachReplicaHoldsItsShareOfTheOptimizerStateAndGradients) {
  const int devices = 4;
  // Bytes of Adam's state and of the gradients for one replica, unsharded.
  int64_t parameter_bytes = 0;
  for (const Variable& p : wide_model()->parameters())
    parameter_bytes += p.value().numel() * static_cast<int64_t>(sizeof(float));
  const distribute::ReducerOptions small_buckets{.bucket_bytes = 64 << 10,
                                                 .first_bucket_bytes = 16 << 10};
  for (int stage : {0, 1, 2}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    auto strategy = strategy_of(devices);
    const Bytes state_before = bytes_on_devices(devices, MemoryCategory::optimizer_state);
    const Bytes grads_before = bytes_on_devices(devices, MemoryCategory::gradients);
    distribute::ReducerOptions reducer = small_buckets;
    reducer.zero_stage = stage;
    auto engine =
        strategy->make_engine(wide_model, {.optimizer = optimizer_of("adamw"), .reducer = reducer});
    for (int d = 0; d < devices; ++d) allocator_for(cpu_device(d)).reset_peaks();
    for (int64_t step = 0; step < 2; ++step) engine->step(batch_of(32, 3), forward, {.step = step});
    const Bytes state = bytes_on_devices(devices, MemoryCategory::optimizer_state);
    const Bytes grads = bytes_on_devices(devices, MemoryCategory::gradients);
    for (int d = 0; d < devices; ++d) {
      // Two moments per parameter element (the update counts are a few bytes).
      const double state_share =
          static_cast<double>(state.current[d] - state_before.current[d]) / (2.0 * parameter_bytes);
      const double grad_share =
          static_cast<double>(grads.peak[d] - grads_before.current[d]) / parameter_bytes;
      if (stage == 0) {
        EXPECT_NEAR(state_share, 1.0, 0.01) << "device " << d;
        EXPECT_NEAR(grad_share, 1.0, 0.01) << "device " << d;
      } else {
        EXPECT_NEAR(state_share, 1.0 / devices, 0.01 / devices) << "device " << d;
        if (stage == 1) {
          EXPECT_NEAR(grad_share, 1.0, 0.01) << "device " << d;
        }
        // Stage 2: the shard, plus the gradients of at most a few parameters
        // between backward producing them and their staging.
        if (stage == 2) {
          EXPECT_NEAR(grad_share, 1.0 / devices, 0.01 / devices) << "device " << d;
        }
      }
    }
  }
}

TEST(Zero, StateSavedWithZeroLoadsWithoutItAndBack) {
  auto zero_strategy = strategy_of(2);
  auto zero = zero_strategy->make_engine(
      model, {.optimizer = optimizer_of("adamw"), .reducer = reducer_of(2)});
  for (int64_t step = 0; step < 3; ++step) zero->step(batch_of(10, step), forward, {.step = step});
  const distribute::EngineState state = zero->save_state();
  // Saved under the replicated optimizer's names, one tensor per parameter.
  EXPECT_TRUE(state.has_tensor("optimizer.0.exp_avg"));
  EXPECT_TRUE(state.has_tensor("optimizer.5.exp_avg_sq"));
  EXPECT_EQ(state.tensor("optimizer.2.exp_avg").shape(), (Shape{13, 23}));
  const Tensor& updates = state.tensor("optimizer.updates");
  ASSERT_EQ(updates.dtype(), DType::i32);
  EXPECT_EQ(std::vector<int32_t>(updates.data<int32_t>(), updates.data<int32_t>() + 6),
            std::vector<int32_t>(6, 3));

  // Into plain training on 3 replicas and on one device, and into ZeRO-1 on 3:
  // the next steps agree with the ZeRO run's.
  auto three = strategy_of(3), one = strategy_of(1), three_zero = strategy_of(3);
  auto plain3 = three->make_engine(model, {.optimizer = optimizer_of("adamw")});
  auto plain1 = one->make_engine(model, {.optimizer = optimizer_of("adamw")});
  auto zero1 = three_zero->make_engine(
      model, {.optimizer = optimizer_of("adamw"), .reducer = reducer_of(1)});
  for (distribute::Engine* e : {plain3.get(), plain1.get(), zero1.get()}) e->load_state(state);
  // And the plain run's state back into ZeRO-2 on 2 replicas.
  auto zero_again_strategy = strategy_of(2);
  auto zero_again = zero_again_strategy->make_engine(
      model, {.optimizer = optimizer_of("adamw"), .reducer = reducer_of(2)});
  zero_again->load_state(plain3->save_state());
  for (int64_t step = 3; step < 6; ++step) {
    const data::Element batch = batch_of(12, 100 + static_cast<uint64_t>(step));
    for (distribute::Engine* e :
         {zero.get(), plain3.get(), plain1.get(), zero1.get(), zero_again.get()})
      e->step(batch, forward, {.step = step});
  }
  expect_same_parameters(*zero, *plain3, 1e-5, "plain, 3 replicas");
  expect_same_parameters(*zero, *plain1, 1e-5, "one device");
  expect_same_parameters(*zero, *zero1, 1e-5, "ZeRO-1, 3 replicas");
  expect_same_parameters(*zero, *zero_again, 1e-5, "back into ZeRO-2");
}

TEST(Zero, ABadCheckpointIsRefusedBeforeAnyReplicaChanges) {
  // Each replica checked only the parameters in its shard: one refused the
  // checkpoint after the others had loaded theirs.
  auto source_strategy = strategy_of(2), target_strategy = strategy_of(2);
  auto source = source_strategy->make_engine(
      model, {.optimizer = optimizer_of("adamw"), .reducer = reducer_of(2)});
  auto target = target_strategy->make_engine(
      model, {.optimizer = optimizer_of("adamw"), .reducer = reducer_of(2)});
  for (int64_t step = 0; step < 2; ++step) {
    source->step(batch_of(10, step), forward, {.step = step});
    target->step(batch_of(10, 50 + static_cast<uint64_t>(step)), forward, {.step = step});
  }
  const auto floats_of = [](const distribute::EngineState& state) {
    std::vector<std::vector<float>> values;
    for (const auto& [name, t] : state.tensors)
      if (t.dtype() == DType::f32) values.push_back(t.to_floats());
    return values;
  };
  const auto before = floats_of(target->save_state());
  for (const std::string spoilt : {"optimizer.0.exp_avg", "optimizer.5.exp_avg_sq"}) {
    distribute::EngineState missing = source->save_state();
    std::erase_if(missing.tensors, [&](const auto& entry) { return entry.first == spoilt; });
    EXPECT_THROW(target->load_state(missing), IoError) << spoilt;
    distribute::EngineState misshapen = source->save_state();
    for (auto& [name, t] : misshapen.tensors)
      if (name == spoilt) t = Tensor::zeros(Shape{t.numel() + 1}, DType::f32);
    EXPECT_THROW(target->load_state(misshapen), IoError) << spoilt;
    EXPECT_EQ(floats_of(target->save_state()), before) << spoilt;
  }
}

struct AccumulationCase {
  int devices;
  int stage;
  std::string optimizer;
};

class Accumulation : public ::testing::TestWithParam<AccumulationCase> {};

TEST_P(Accumulation, FourMicroBatchesTakeTheStepOfTheWholeBatch) {
  const AccumulationCase c = GetParam();
  auto whole_strategy = strategy_of(1);
  auto micro_strategy = strategy_of(c.devices);
  auto whole = whole_strategy->make_engine(model, {.optimizer = optimizer_of(c.optimizer)});
  auto micro = micro_strategy->make_engine(model, {.optimizer = optimizer_of(c.optimizer),
                                                   .reducer = reducer_of(c.stage),
                                                   .accumulation_steps = 4});
  for (int64_t step = 0; step < 4; ++step) {
    // 32 rows: 4 micro-batches per replica; 30: uneven micro-batches.
    const data::Element batch = batch_of(step == 3 ? 30 : 32, 7 + static_cast<uint64_t>(step));
    const distribute::StepResult a = whole->step(batch, forward, {.step = step});
    const distribute::StepResult b = micro->step(batch, forward, {.step = step});
    EXPECT_NEAR(a.loss, b.loss, 1e-6 * std::max(1.0, a.loss)) << "step " << step;
    EXPECT_EQ(b.global_rows, a.global_rows);
  }
  expect_same_parameters(*whole, *micro, 1e-5, "accumulated");
}

INSTANTIATE_TEST_SUITE_P(
    Replicas, Accumulation,
    ::testing::Values(AccumulationCase{1, 0, "sgd"}, AccumulationCase{1, 0, "adamw"},
                      AccumulationCase{2, 0, "sgd"}, AccumulationCase{3, 0, "adamw"},
                      AccumulationCase{2, 1, "adamw"}, AccumulationCase{2, 2, "sgd"},
                      AccumulationCase{3, 2, "adamw"}),
    [](const ::testing::TestParamInfo<AccumulationCase>& p) {
      return std::to_string(p.param.devices) + "devices_zero" + std::to_string(p.param.stage) +
             "_" + p.param.optimizer;
    });

TEST(Zero, BadSettingsAreClearErrors) {
  auto strategy = strategy_of(2);
  const auto message = [&](const distribute::EngineOptions& options) {
    try {
      strategy->make_engine(model, options);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({.reducer = reducer_of(3)}).find("stage 3, sharded parameters, is not offered"),
            std::string::npos);
  EXPECT_NE(message({.reducer = reducer_of(-1)}).find("ZeRO stage must be"), std::string::npos);
  EXPECT_NE(message({.accumulation_steps = 0}).find("at least 1 micro-batch"), std::string::npos);
  distribute::ReducerOptions compressed = reducer_of(2);
  compressed.wire = comm::WireDType::bf16;
  EXPECT_NE(message({.reducer = compressed}).find("wire bf16 is not supported"), std::string::npos);
}

TEST(Zero, TheGatheredStateIsTheSameInPiecesAndOnlyTheKeeperHoldsIt) {
  // Three ranks, Adam after one step; the state gathered 5 elements per rank
  // at a time equals the state gathered in one piece.
  comm::InProcessGroup group(3);
  std::vector<std::vector<std::pair<std::string, Tensor>>> whole(3), pieces(3);
  testing::run_ranks(3, [&](int r) {
    auto comm = group.communicator(r);
    auto m = model();
    distribute::Reducer reducer(m->parameters(), *comm, reducer_of(1));
    distribute::ShardedOptimizer sharded(m->parameters(), reducer, *comm, optimizer_of("adamw"));
    reducer.prepare();
    const data::Element batch = batch_of(6, 9 + static_cast<uint64_t>(r));
    sum(forward(*m, {batch, 6, distribute::ReplicaContext{}})).backward();
    reducer.finish();
    sharded.update(nullptr, 0.0);
    whole[r] = sharded.gather_state(true);
    pieces[r] = sharded.gather_state(r == 0, 5);
  });
  EXPECT_TRUE(pieces[1].empty());
  EXPECT_TRUE(pieces[2].empty());
  ASSERT_EQ(whole[0].size(), pieces[0].size());
  ASSERT_EQ(whole[0].size(), 13u);  // 2 moments x 6 parameters, the update counts
  for (size_t i = 0; i < whole[0].size(); ++i) {
    EXPECT_EQ(whole[0][i].first, pieces[0][i].first);
    EXPECT_EQ(whole[0][i].second.shape(), pieces[0][i].second.shape()) << whole[0][i].first;
    if (whole[0][i].second.dtype() == DType::f32) {
      EXPECT_EQ(whole[0][i].second.to_floats(), pieces[0][i].second.to_floats())
          << whole[0][i].first;
      EXPECT_EQ(whole[0][i].second.to_floats(), whole[2][i].second.to_floats())
          << whole[0][i].first;
    }
  }
}

TEST(Reducer, ZeroTwoReduceScattersEachBucketIntoItsShardAndKeepsNoWholeGradient) {
  // Three ranks, buckets of 4 bytes (each parameter fills one), padded to 3.
  comm::InProcessGroup group(3);
  std::vector<std::vector<std::vector<float>>> shards(3);
  testing::run_ranks(3, [&](int r) {
    auto comm = group.communicator(r);
    Variable a(Tensor::full(Shape{2}, 1.0f), true), b(Tensor::full(Shape{4}, 1.0f), true),
        unused(Tensor::full(Shape{1}, 1.0f), true);
    distribute::Reducer reducer({a, b, unused}, *comm,
                                {.bucket_bytes = 4, .first_bucket_bytes = 4, .zero_stage = 2});
    EXPECT_EQ(reducer.bucket_count(), 3u);
    // Two passes accumulate into the shard.
    for (int pass = 0; pass < 2; ++pass) {
      reducer.prepare(true, /*accumulate=*/pass == 1);
      sum(add(sum(scale(a, static_cast<float>(r + 1))), sum(scale(b, 10.0f)))).backward();
      reducer.finish();
      EXPECT_FALSE(a.has_grad());
      EXPECT_FALSE(b.has_grad());
    }
    for (size_t k = 0; k < reducer.bucket_count(); ++k)
      shards[r].push_back(reducer.shard_gradient(k).to_floats());
    EXPECT_THROW(reducer.prepare(false), InvalidArgument);
  });
  // Buckets in reverse parameter order: unused (1 element, padded to 3),
  // b (4, padded to 6), a (2, padded to 3). Sums over ranks, twice:
  // a: 2 * (1 + 2 + 3) = 12, b: 2 * 30 = 60.
  EXPECT_EQ(shards[0][0], std::vector<float>{0.0f});
  EXPECT_EQ(shards[0][1], (std::vector<float>{60.0f, 60.0f}));
  EXPECT_EQ(shards[1][1], (std::vector<float>{60.0f, 60.0f}));
  EXPECT_EQ(shards[2][1], (std::vector<float>{0.0f, 0.0f}));  // padding
  EXPECT_EQ(shards[0][2], std::vector<float>{12.0f});
  EXPECT_EQ(shards[1][2], std::vector<float>{12.0f});
  EXPECT_EQ(shards[2][2], std::vector<float>{0.0f});
}

}  // namespace
}  // namespace tandem
