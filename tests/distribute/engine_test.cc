// The step engine used directly (a custom loop), the replica context it
// installs, its state save/load, and the exact cross-replica agreement.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "support/model_batches.h"
#include "support/test_data.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/random.h"
#include "tandem/distribute/agreement.h"
#include "tandem/distribute/strategy.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/sequential.h"

namespace tandem {
namespace {

std::unique_ptr<distribute::Strategy> mirrored(int devices) {
  return distribute::make_strategy({.kind = distribute::StrategyKind::mirrored,
                                    .devices = devices,
                                    .threads_per_device = 1,
                                    .allow_oversubscription = true});
}

std::shared_ptr<nn::Module> linear_model() {
  Generator g(3);
  auto m = std::make_shared<nn::Sequential>();
  m->emplace<nn::Linear>(3, 1, nn::LinearOptions{}, g);
  return m;
}

data::Element batch_of(int64_t rows, uint64_t seed) {
  return testing::regression_batch(rows, 3, seed);
}

// Squared error per example.
constexpr auto forward = &testing::squared_error_loss;

TEST(Agreement, SumsAreExactAndInGlobalReplicaOrder) {
  for (int devices : {1, 2, 3, 5}) {
    auto strategy = mirrored(devices);
    std::vector<std::vector<double>> values;
    double expected_tiny = 0.0;
    for (int r = 0; r < devices; ++r) {
      // 1e16 + small: a float32 (or a float32 pair) would lose the small part.
      values.push_back({1e16, 1.0 + r, std::ldexp(1.0, -60) * (r + 1)});
      expected_tiny += std::ldexp(1.0, -60) * (r + 1);
    }
    const std::vector<double> sum = distribute::sum_over_replicas(*strategy, values);
    ASSERT_EQ(sum.size(), 3u);
    double expected_first = 0.0;
    for (int r = 0; r < devices; ++r) expected_first += 1e16;
    EXPECT_EQ(sum[0], expected_first);
    EXPECT_EQ(sum[1], devices + devices * (devices - 1) / 2.0);
    EXPECT_EQ(sum[2], expected_tiny);
    const std::vector<double> all = distribute::gather_over_replicas(*strategy, values);
    ASSERT_EQ(all.size(), static_cast<size_t>(3 * devices));
    for (int r = 0; r < devices; ++r) EXPECT_EQ(all[3 * r + 1], 1.0 + r);
    EXPECT_EQ(distribute::sum_over_processes(*strategy, std::vector<int64_t>{7, -2}),
              (std::vector<int64_t>{7, -2}));  // one process
    EXPECT_TRUE(distribute::any_process(*strategy, true));
    EXPECT_FALSE(distribute::any_process(*strategy, false));
    EXPECT_EQ(distribute::broadcast_from_chief(*strategy, std::vector<double>{0.25}),
              std::vector<double>{0.25});
    if (devices > 1) {
      values[1].pop_back();
      EXPECT_THROW(distribute::sum_over_replicas(*strategy, values), InvalidArgument);
    }
    EXPECT_THROW(
        distribute::sum_over_replicas(*strategy, {{1.0}, {1.0}, {1.0}, {1.0}, {1.0}, {1.0}}),
        InvalidArgument);  // not one vector per replica
  }
}

TEST(ReplicaContext, EachReplicaRunsUnderItsOwnContextAndTheCallerIsRestored) {
  auto strategy = mirrored(3);
  EXPECT_EQ(distribute::current_replica_context(), nullptr);
  std::vector<int> seen(3, -1), threads(3, 0);
  std::vector<Device> devices(3);
  strategy->run([&](int r) {
    const distribute::ReplicaContext* c = distribute::current_replica_context();
    ASSERT_NE(c, nullptr);
    seen[r] = c->global_replica;
    threads[r] = num_threads();
    devices[r] = current_device();
    EXPECT_EQ(c->num_replicas, 3);
    EXPECT_EQ(c->communicator, strategy->communicator(r));
    EXPECT_NE(current_cross_replica_sum(), nullptr);
  });
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(threads, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(devices[2], cpu_device(2));

  // One device runs on the caller's thread: its state comes back afterwards.
  auto one = distribute::make_strategy(
      {.kind = distribute::StrategyKind::one_device, .threads_per_device = 1});
  set_num_threads(2);
  thread_generator().set_state(99, 5);
  one->run([&](int) {
    EXPECT_EQ(num_threads(), 1);
    EXPECT_EQ(distribute::current_replica_context()->global_replica, 0);
    thread_generator().set_state(1, 1);
  });
  EXPECT_EQ(num_threads(), 2);
  EXPECT_EQ(thread_generator().seed(), 99u);
  EXPECT_EQ(thread_generator().offset(), 5u);
  EXPECT_EQ(distribute::current_replica_context(), nullptr);
}

TEST(Engine, StepsOverReplicasTakeTheOneDeviceStep) {
  auto one = distribute::make_strategy(
      {.kind = distribute::StrategyKind::one_device, .threads_per_device = 1});
  auto two = mirrored(2);
  const distribute::EngineOptions options{
      .optimizer = {.kind = optim::OptimizerKind::sgd, .learning_rate = 0.1}};
  auto a = one->make_engine(linear_model, options);
  auto b = two->make_engine(linear_model, options);
  EXPECT_EQ(b->name(), "all_reduce");
  for (int64_t step = 0; step < 5; ++step) {
    // 7 rows: the replicas take 4 and 3; the last step has 1 row (one replica idle).
    const data::Element batch = batch_of(step == 4 ? 1 : 7, static_cast<uint64_t>(step));
    const distribute::StepResult ra = a->step(batch, forward, {.step = step});
    const distribute::StepResult rb = b->step(batch, forward, {.step = step});
    EXPECT_NEAR(ra.loss, rb.loss, 1e-6) << "step " << step;
    EXPECT_EQ(rb.global_rows, step == 4 ? 1 : 7);
    ASSERT_EQ(rb.replica_loss_sums.size(), 2u);
    EXPECT_NEAR(rb.replica_loss_sums[0] + rb.replica_loss_sums[1], rb.loss * rb.global_rows, 1e-5);
    EXPECT_EQ(rb.replicas.size(), 2u);
  }
  const auto pa = a->model().parameters(), pb = b->model(1).parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const auto x = pa[i].value().to_floats(), y = pb[i].value().to_floats();
    for (size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(x[k], y[k], 1e-6);
  }
}

TEST(Engine, StateLoadsIntoAnyReplicaCount) {
  auto two = mirrored(2);
  auto engine = two->make_engine(
      linear_model, {.optimizer = {.kind = optim::OptimizerKind::adam, .learning_rate = 0.01}});
  for (int64_t step = 0; step < 3; ++step) engine->step(batch_of(6, 7), forward, {.step = step});
  const distribute::EngineState state = engine->save_state();
  EXPECT_TRUE(state.has_tensor("model.0.weight"));
  EXPECT_GT(state.tensors.size(), 4u);  // weights, bias, Adam's moments, update counts
  auto three = mirrored(3);
  auto restored = three->make_engine(
      [] {
        Generator g(77);  // other initial weights: the state replaces them
        auto m = std::make_shared<nn::Sequential>();
        m->emplace<nn::Linear>(3, 1, nn::LinearOptions{}, g);
        return m;
      },
      {.optimizer = {.kind = optim::OptimizerKind::adam, .learning_rate = 0.01}});
  restored->load_state(state);
  const distribute::StepResult x = engine->step(batch_of(6, 8), forward, {.step = 3});
  const distribute::StepResult y = restored->step(batch_of(6, 8), forward, {.step = 3});
  EXPECT_NEAR(x.loss, y.loss, 1e-6);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(restored->model(r).parameters()[0].value().to_floats(),
              restored->model(0).parameters()[0].value().to_floats());
  }
  distribute::EngineState wrong = state;
  wrong.tensors[0].second = Tensor::zeros(Shape{7});
  EXPECT_THROW(restored->load_state(wrong), IoError);
}

TEST(Engine, BadForwardsAndBatchesAreClearErrors) {
  auto two = mirrored(2);
  auto engine = two->make_engine(linear_model, {});
  const auto message = [&](const distribute::ForwardFn& f, const data::Element& batch) {
    try {
      engine->step(batch, f);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const distribute::ForwardFn mean_loss = [](nn::Module& m, const distribute::ReplicaBatch& b) {
    return mean(forward(m, b));  // a scalar, not per-example losses
  };
  EXPECT_NE(message(mean_loss, batch_of(4, 1)).find("per-example losses of shape (2)"),
            std::string::npos);
  EXPECT_NE(message(forward, data::Element{}).find("batch with features"), std::string::npos);
  data::Element empty = batch_of(4, 1);
  empty.set("x", empty.at("x").slice(0, 0));
  empty.set("y", empty.at("y").slice(0, 0));
  EXPECT_NE(message(forward, empty).find("at least one row"), std::string::npos);
  // Every replica throws (one replica alone throwing is the next test).
  const distribute::ForwardFn throws = [](nn::Module&,
                                          const distribute::ReplicaBatch& b) -> Variable {
    TANDEM_THROW(InvalidArgument, "replica ", b.context.local_replica, " says no");
  };
  EXPECT_NE(message(throws, batch_of(4, 1)).find(" says no"), std::string::npos);
}

TEST(Engine, AReplicaThatThrowsEndsItsPeersAtOnceWithItsOwnError) {
  // The other replicas wait for replica 1 in the gradient all-reduce; with a
  // one-minute deadline, only its failure breaking the group ends them in time.
  auto strategy = distribute::make_strategy({.kind = distribute::StrategyKind::mirrored,
                                             .devices = 3,
                                             .threads_per_device = 1,
                                             .allow_oversubscription = true,
                                             .comm = {.timeout = std::chrono::seconds(60)}});
  auto engine =
      strategy->make_engine(linear_model, {.optimizer = {.kind = optim::OptimizerKind::sgd}});
  const distribute::ForwardFn failing = [](nn::Module& model, const distribute::ReplicaBatch& b) {
    if (b.context.local_replica == 1) throw InvalidArgument("label 12 is not a class of 10");
    return forward(model, b);
  };
  const auto start = std::chrono::steady_clock::now();
  try {
    engine->step(batch_of(9, 1), failing, {.step = 0});
    ADD_FAILURE() << "the step succeeded";
  } catch (const PeerFailed& e) {
    ADD_FAILURE() << "the peers' report, not the failure, came back: " << e.what();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "label 12 is not a class of 10");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace tandem
