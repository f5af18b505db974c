// The parameter-server engine (synchronous rounds against mirrored
// training, the staleness bound under a straggler, backup workers, its
// checkpoints), local SGD, the variable partitioner and the settings'
// checks.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>

#include "support/model_batches.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/data/distribute.h"
#include "tandem/distribute/parameter_server.h"
#include "tandem/distribute/strategy.h"
#include "tandem/nn/activation.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/sequential.h"

namespace tandem {
namespace {

std::unique_ptr<distribute::Strategy> make(const std::string& name, int devices) {
  return distribute::make_strategy({.kind = distribute::parse_strategy(name),
                                    .devices = devices,
                                    .threads_per_device = 1,
                                    .allow_oversubscription = true});
}

// Two layers, so that there are several variables to place.
std::shared_ptr<nn::Module> small_mlp() {
  Generator g(5);
  auto m = std::make_shared<nn::Sequential>();
  m->emplace<nn::Linear>(3, 8, nn::LinearOptions{}, g);
  m->emplace<nn::ReLU>();
  m->emplace<nn::Linear>(8, 1, nn::LinearOptions{}, g);
  return m;
}

data::Element batch_of(int64_t rows, uint64_t seed) {
  return testing::regression_batch(rows, 3, seed);
}

// Squared error per example.
constexpr auto squared_error = &testing::squared_error_loss;

double max_relative_error(nn::Module& a, nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  double worst = 0.0;
  for (size_t i = 0; i < pa.size(); ++i) {
    const auto x = pa[i].value().to_floats(), y = pb[i].value().to_floats();
    for (size_t k = 0; k < x.size(); ++k) {
      const double scale = std::max(1e-3, static_cast<double>(std::fabs(x[k])));
      worst = std::max(worst, std::fabs(static_cast<double>(x[k]) - y[k]) / scale);
    }
  }
  return worst;
}

TEST(VariablePartition, SplitsLargeVariablesOverDistinctShardsAndBalancesTheRest) {
  const std::vector<Shape> shapes = {Shape{1000, 100}, Shape{100}, Shape{10, 10}, Shape{300, 300},
                                     Shape{}};
  const auto pieces = distribute::partition_variables(shapes, 3, 64 << 10);
  std::vector<int64_t> load(3, 0);
  for (size_t v = 0; v < shapes.size(); ++v) {
    std::vector<int> shards;
    int64_t next_row = 0;
    for (const auto& p : pieces) {
      if (p.variable != v) continue;
      EXPECT_EQ(p.begin, next_row) << "variable " << v;
      next_row = p.end;
      shards.push_back(p.shard);
      load[p.shard] += p.bytes;
    }
    EXPECT_EQ(next_row, shapes[v].rank() == 0 ? 1 : shapes[v][0]) << "variable " << v;
    std::sort(shards.begin(), shards.end());
    EXPECT_EQ(std::unique(shards.begin(), shards.end()), shards.end()) << "variable " << v;
    // 400 KB and 360 KB: three pieces each; the small ones whole.
    EXPECT_EQ(shards.size(), v == 0 || v == 3 ? 3u : 1u) << "variable " << v;
  }
  const int64_t total = std::accumulate(load.begin(), load.end(), int64_t{0});
  EXPECT_EQ(total, (100000 + 100 + 100 + 90000 + 1) * 4);
  for (int64_t l : load) EXPECT_LT(std::abs(l - total / 3), 1000) << "shard bytes " << l;

  for (const auto& p : distribute::partition_variables(shapes, 3, 64 << 10, /*split=*/false))
    EXPECT_EQ(p.end - p.begin, shapes[p.variable].rank() == 0 ? 1 : shapes[p.variable][0]);
  EXPECT_EQ(distribute::partition_variables(shapes, 3, 64 << 10).size(), pieces.size());
  EXPECT_THROW(distribute::partition_variables(shapes, 0, 1), InvalidArgument);
  EXPECT_THROW(distribute::partition_variables(shapes, 1, 0), InvalidArgument);
}

// Synchronous rounds take mirrored training's steps, whatever the shards.
TEST(ParameterServer, ResultsOfNoRowsLeaveTheLossAlone) {
  // The engine's result of a call that applied nothing has a NaN loss and
  // no rows; NaN * 0 made the accumulated loss NaN. A real NaN loss stays.
  distribute::StepResult total{.loss = 2.0, .global_rows = 4};
  distribute::accumulate_step_counts(total, {.loss = std::nan(""), .global_rows = 0});
  EXPECT_EQ(total.loss, 2.0);
  distribute::StepResult empty{.loss = std::nan(""), .global_rows = 0};
  distribute::accumulate_step_counts(empty, {.loss = 3.0, .global_rows = 2});
  EXPECT_EQ(empty.loss, 3.0);
  EXPECT_EQ(empty.global_rows, 2);
  distribute::accumulate_step_counts(empty, {.loss = std::nan(""), .global_rows = 2});
  EXPECT_TRUE(std::isnan(empty.loss));
}

TEST(ParameterServer, SynchronousRoundsEqualMirroredTraining) {
  for (const std::string optimizer : {"sgd", "adam"}) {
    for (int workers : {2, 3}) {
      SCOPED_TRACE(optimizer + " with " + std::to_string(workers) + " workers");
      distribute::EngineOptions options{
          .optimizer = {.kind = optim::parse_optimizer(optimizer),
                        .learning_rate = optimizer == "sgd" ? 0.1 : 0.01}};
      auto mirrored = make("mirrored", workers);
      auto reference = mirrored->make_engine(small_mlp, options);
      options.parameter_server = {.shards = 2, .max_staleness = 0, .min_shard_bytes = 16};
      auto ps_strategy = make("parameter_server", workers);
      auto ps = ps_strategy->make_engine(small_mlp, options);
      EXPECT_EQ(ps->name(), "parameter_server");
      double ps_loss = 0.0, reference_loss = 0.0;
      int64_t rows = 0;
      for (int64_t step = 0; step < 6; ++step) {
        // 7 rows split unevenly; the last batch has 2 (a worker without rows).
        const data::Element batch = batch_of(step == 5 ? 2 : 7, 100 + static_cast<uint64_t>(step));
        reference_loss +=
            reference->step(batch, squared_error, {.step = step}).loss * (step == 5 ? 2 : 7);
        const distribute::StepResult r = ps->step(batch, squared_error, {.step = step});
        ps_loss += r.global_rows > 0 ? r.loss * static_cast<double>(r.global_rows) : 0.0;
        rows += r.global_rows;
      }
      const distribute::StepResult rest = ps->synchronize();
      ps_loss += rest.global_rows > 0 ? rest.loss * static_cast<double>(rest.global_rows) : 0.0;
      rows += rest.global_rows;
      EXPECT_EQ(rows, 5 * 7 + 2);
      EXPECT_NEAR(ps_loss, reference_loss, 1e-4 * std::fabs(reference_loss));
      for (int w = 0; w < workers; ++w)
        EXPECT_LT(max_relative_error(reference->model(0), ps->model(w)), 1e-5) << "worker " << w;
    }
  }
}

// Every applied gradient's staleness, counted over the calls.
std::vector<int64_t> train_and_count_staleness(
    distribute::Engine& engine, int steps, const distribute::ForwardFn& forward = squared_error) {
  distribute::StepResult total;
  for (int64_t step = 0; step < steps; ++step)
    distribute::accumulate_step_counts(
        total, engine.step(batch_of(12, static_cast<uint64_t>(step)), forward, {.step = step}));
  distribute::accumulate_step_counts(total, engine.synchronize());
  return total.staleness;
}

TEST(ParameterServer, NoAppliedGradientExceedsTheStalenessBoundUnderAStraggler) {
  // Worker 2 is four times slower: the fast ones run ahead until the bound stops them.
  for (int64_t bound : {1, 2, 4}) {
    SCOPED_TRACE("max staleness " + std::to_string(bound));
    auto strategy = make("parameter_server", 3);
    auto engine = strategy->make_engine(
        small_mlp, {.optimizer = {.kind = optim::OptimizerKind::sgd, .learning_rate = 0.05},
                    .slow_replica = {.replica = 2, .factor = 4.0},
                    .parameter_server = {.max_staleness = bound}});
    const std::vector<int64_t> staleness = train_and_count_staleness(*engine, 20);
    ASSERT_FALSE(staleness.empty());
    EXPECT_LE(static_cast<int64_t>(staleness.size()) - 1, bound);
    EXPECT_EQ(std::accumulate(staleness.begin(), staleness.end(), int64_t{0}), 20 * 3)
        << "every share's gradient is applied";
    if (bound >= 2) {
      EXPECT_GT(staleness.back(), 0) << "the bound is reached";
    }
  }
  // Unbounded: the straggler's gradients land after several of the others'.
  // Compute here takes microseconds, so 4x of it is lost in the threads'
  // scheduling on a loaded machine: the straggler sleeps 20 ms a share, in
  // which the others apply several updates. The others sleep 2 ms, or on a
  // loaded machine they drain every share before the straggler's thread
  // wakes, one at a time, and every gradient is fresh.
  const auto slower = [](nn::Module& model, const distribute::ReplicaBatch& b) {
    std::this_thread::sleep_for(std::chrono::milliseconds(b.context.global_replica == 2 ? 20 : 2));
    return squared_error(model, b);
  };
  auto strategy = make("parameter_server", 3);
  auto engine = strategy->make_engine(
      small_mlp, {.optimizer = {.kind = optim::OptimizerKind::sgd, .learning_rate = 0.05},
                  .slow_replica = {.replica = 2, .factor = 4.0}});
  const std::vector<int64_t> staleness = train_and_count_staleness(*engine, 20, slower);
  EXPECT_EQ(std::accumulate(staleness.begin(), staleness.end(), int64_t{0}), 20 * 3);
  EXPECT_GE(staleness.size(), 3u);
}

TEST(ParameterServer, BackupWorkersDropTheLateGradientAndAverageTheOthers) {
  // Worker 2 answers far too late for every round: each update is the mean
  // over workers 0 and 1's rows, which one device takes on their rows alone.
  const auto slow_forward = [](nn::Module& model, const distribute::ReplicaBatch& b) {
    if (b.context.global_replica == 2) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return squared_error(model, b);
  };
  const distribute::EngineOptions options{
      .optimizer = {.kind = optim::OptimizerKind::sgd, .learning_rate = 0.1}};
  auto strategy = make("parameter_server", 3);
  distribute::EngineOptions ps_options = options;
  ps_options.parameter_server = {.max_staleness = 0, .backup_workers = 1};
  auto engine = strategy->make_engine(small_mlp, ps_options);
  auto one = distribute::make_strategy(
      {.kind = distribute::StrategyKind::one_device, .threads_per_device = 1});
  auto reference = one->make_engine(small_mlp, options);
  distribute::StepResult total;
  for (int64_t step = 0; step < 6; ++step) {
    const data::Element batch = batch_of(9, 40 + static_cast<uint64_t>(step));  // 3 rows each
    distribute::accumulate_step_counts(total, engine->step(batch, slow_forward, {.step = step}));
    // split_batch gives worker r rows [3r, 3r + 3).
    const data::Element kept{{"x", batch.at("x").slice(0, 6)}, {"y", batch.at("y").slice(0, 6)}};
    reference->step(kept, squared_error, {.step = step});
  }
  distribute::accumulate_step_counts(total, engine->synchronize());
  EXPECT_EQ(total.dropped_rows, (std::vector<int64_t>{0, 0, 6 * 3}));
  EXPECT_EQ(total.staleness, (std::vector<int64_t>{6 * 2}));
  EXPECT_LT(max_relative_error(reference->model(0), engine->model(0)), 1e-5);
}

TEST(ParameterServer, CheckpointsLoadIntoMirroredTrainingAndBack) {
  const distribute::EngineOptions adam{
      .optimizer = {.kind = optim::OptimizerKind::adam, .learning_rate = 0.01}};
  distribute::EngineOptions ps_options = adam;
  ps_options.parameter_server = {.shards = 3, .min_shard_bytes = 16};
  auto ps_strategy = make("parameter_server", 2);
  auto ps = ps_strategy->make_engine(small_mlp, ps_options);
  for (int64_t step = 0; step < 4; ++step) ps->step(batch_of(8, 9), squared_error, {.step = step});
  const distribute::EngineState state = ps->save_state();
  auto mirrored_strategy = make("mirrored", 3);
  auto mirrored = mirrored_strategy->make_engine(small_mlp, adam);
  mirrored->load_state(state);
  EXPECT_LT(max_relative_error(ps->model(0), mirrored->model(2)), 1e-7);
  // The optimizer state too: both take the same next step.
  const distribute::EngineState back = mirrored->save_state();
  ASSERT_EQ(back.tensors.size(), state.tensors.size());
  for (const auto& [name, t] : state.tensors)
    EXPECT_EQ(back.tensor(name).to_floats(), t.to_floats()) << name;
  auto again = ps_strategy->make_engine(small_mlp, ps_options);
  again->load_state(back);
  const distribute::EngineState twice = again->save_state();
  for (const auto& [name, t] : state.tensors)
    EXPECT_EQ(twice.tensor(name).to_floats(), t.to_floats()) << name;
  distribute::EngineState wrong = state;
  for (auto& [name, t] : wrong.tensors)
    if (name == "optimizer.0.exp_avg") t = Tensor::zeros(Shape{2, 2});
  EXPECT_THROW(again->load_state(wrong), IoError);
}

TEST(ParameterServer, AWorkersErrorEndsTheStepInsteadOfHanging) {
  for (std::optional<int64_t> bound : {std::optional<int64_t>{}, std::optional<int64_t>{0}}) {
    auto strategy = make("parameter_server", 2);
    auto engine = strategy->make_engine(small_mlp, {.parameter_server = {.max_staleness = bound}});
    const auto failing = [](nn::Module& model, const distribute::ReplicaBatch& b) {
      if (b.context.global_replica == 1) TANDEM_THROW(InvalidArgument, "worker 1 broke");
      return squared_error(model, b);
    };
    EXPECT_THROW(
        {
          for (int64_t step = 0; step < 50; ++step)
            engine->step(batch_of(4, 1), failing, {.step = step});
          engine->synchronize();
        },
        InvalidArgument);
    EXPECT_THROW(engine->synchronize(), InvalidArgument);  // and stays failed
  }
}

TEST(LocalSgd, AveragingEveryStepEqualsSynchronousTraining) {
  const distribute::EngineOptions sgd{
      .optimizer = {.kind = optim::OptimizerKind::sgd, .learning_rate = 0.1, .momentum = 0.9}};
  auto a = make("mirrored", 2);
  auto b = make("mirrored", 2);
  auto synchronous = a->make_engine(small_mlp, sgd);
  distribute::EngineOptions local = sgd;
  local.sync_every = 1;
  auto every_step = b->make_engine(small_mlp, local);
  EXPECT_EQ(every_step->name(), "local_sgd");
  for (int64_t step = 0; step < 5; ++step) {
    const data::Element batch = batch_of(8, 60 + static_cast<uint64_t>(step));  // equal shares
    synchronous->step(batch, squared_error, {.step = step});
    every_step->step(batch, squared_error, {.step = step});
  }
  EXPECT_LT(max_relative_error(synchronous->model(0), every_step->model(1)), 1e-5);

  // Every 4 steps: the replicas drift apart in between, synchronize() joins them.
  auto c = make("mirrored", 2);
  local.sync_every = 4;
  local.average_optimizer_state = true;
  auto periodic = c->make_engine(small_mlp, local);
  for (int64_t step = 0; step < 3; ++step)
    periodic->step(batch_of(8, 80 + static_cast<uint64_t>(step)), squared_error, {.step = step});
  EXPECT_GT(max_relative_error(periodic->model(0), periodic->model(1)), 1e-6);
  periodic->synchronize();
  EXPECT_EQ(max_relative_error(periodic->model(0), periodic->model(1)), 0.0);
  EXPECT_GT(max_relative_error(periodic->model(0), synchronous->model(0)), 1e-4);
}

// Each replica keeps its own momentum between averages; a checkpoint holds
// one state. A resumed engine (every replica given the checkpoint's) trains
// as the engine that saved it goes on: the checkpoint held replica 0's
// momentum, which the resumed replica 1 took in place of its own.
TEST(LocalSgd, AResumedEngineTrainsAsTheOneThatSavedIt) {
  distribute::EngineOptions local{
      .optimizer = {.kind = optim::OptimizerKind::sgd, .learning_rate = 0.1, .momentum = 0.9},
      .sync_every = 4};
  auto a = make("mirrored", 2);
  auto b = make("mirrored", 2);
  auto saver = a->make_engine(small_mlp, local);
  auto resumed = b->make_engine(small_mlp, local);
  const auto batch = [](int64_t step) { return batch_of(8, 90 + static_cast<uint64_t>(step)); };
  for (int64_t step = 0; step < 3; ++step) saver->step(batch(step), squared_error, {.step = step});
  resumed->load_state(saver->save_state());
  for (int64_t step = 3; step < 9; ++step) {
    saver->step(batch(step), squared_error, {.step = step});
    resumed->step(batch(step), squared_error, {.step = step});
  }
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(max_relative_error(saver->model(r), resumed->model(r)), 0.0) << "replica " << r;
}

TEST(EngineOptions, SettingsThatCannotWorkAreRefused) {
  auto two = make("parameter_server", 2);
  const auto refuses = [&](distribute::Strategy& strategy, const distribute::EngineOptions& o,
                           const std::string& words) {
    try {
      strategy.make_engine(small_mlp, o);
      ADD_FAILURE() << "accepted; expected an error about " << words;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refuses(*two, {.parameter_server = {.max_staleness = -1}}, "--max-staleness");
  refuses(*two, {.parameter_server = {.max_staleness = 0, .backup_workers = 2}},
          "--backup-workers");
  refuses(*two, {.parameter_server = {.backup_workers = 1}}, "synchronous rounds");
  refuses(*two, {.parameter_server = {.shards = 0}}, "--ps");
  refuses(*two, {.slow_replica = {.replica = 2, .factor = 2.0}}, "replica 2");
  refuses(*two, {.slow_replica = {.replica = 1, .factor = 0.5}}, "factor");
  refuses(*two, {.accumulation_steps = 2}, "accumulation");
  auto mirrored = make("mirrored", 2);
  refuses(*mirrored, {.sync_every = -1}, "--sync-every");
  refuses(*mirrored, {.reducer = {.zero_stage = 1}, .sync_every = 2}, "ZeRO");
  auto one = distribute::make_strategy(
      {.kind = distribute::StrategyKind::one_device, .threads_per_device = 1});
  refuses(*one, {.sync_every = 2}, "one");
}

}  // namespace
}  // namespace tandem
