// MultiWorkerMirrored under mpirun: every process also trains the one-device
// reference itself and compares; run with 1 and 2 devices per process.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include <filesystem>
#include <functional>

#include "support/equivalence.h"
#include "support/model_batches.h"
#include "support/reference.h"
#include "support/test_files.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/comm/mpi.h"
#include "tandem/data/fashion_mnist.h"
#include "tandem/distribute/agreement.h"
#include "tandem/distribute/strategy.h"
#include "tandem/nn/flatten.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/models.h"
#include "tandem/nn/sequential.h"
#include "tandem/precision/policy.h"
#include "tandem/train/trainer.h"

namespace tandem {
namespace {

using testing::expect_same_parameters;
using testing::relative_error;

class MultiWorkerTest : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(MultiWorkerTest, MatchesOneDevice) {
  const auto [devices, model] = GetParam();
  const data::FashionMnist fashion = data::load_fashion_mnist(TANDEM_FASHION_MNIST_DIR);
  // In order: DATA sharding then gives the processes the rows of the
  // one-device global batches between them.
  const data::Dataset train =
      data::as_dataset({fashion.train.images.slice(0, 50), fashion.train.labels.slice(0, 50)});
  const data::Dataset test =
      data::as_dataset({fashion.test.images.slice(0, 20), fashion.test.labels.slice(0, 20)});
  const int processes = comm::mpi_world_size();
  train::TrainConfig c{.epochs = 1,
                       .batch_size = 12,
                       .engine = {.seed = 5},
                       .schedule = optim::ScheduleKind::constant};
  c.engine.optimizer = {.kind = optim::OptimizerKind::adam, .learning_rate = 0.002};
  const train::ModelFactory factory = train::builtin_model(model, precision::Policy::float32, 3);
  train::TrainConfig reference_config = c;
  reference_config.strategy = {.kind = distribute::StrategyKind::one_device,
                               .threads_per_device = 1};
  train::Trainer reference(reference_config, factory);
  std::vector<double> expected_losses;
  const train::TrainResult expected = reference.fit(
      train, test,
      {.on_step = [&](const train::StepInfo& s) { expected_losses.push_back(s.loss); }});

  c.strategy = {.kind = distribute::StrategyKind::multi_worker,
                .devices = devices,
                .threads_per_device = 1,
                .allow_oversubscription = true};
  train::Trainer trainer(c, factory);
  EXPECT_EQ(trainer.strategy().global_replicas(), processes * devices);
  std::vector<double> losses;
  const train::TrainResult result = trainer.fit(
      train, test, {.on_step = [&](const train::StepInfo& s) { losses.push_back(s.loss); }});
  const auto a = reference.model().named_parameters();
  for (int r = 0; r < devices; ++r) {
    const auto b = trainer.replica_model(r).named_parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_LT(relative_error(a[i].second.value().to_floats(), b[i].second.value().to_floats()),
                1e-5)
          << a[i].first << " on local replica " << r;
    }
  }
  // Metrics are over the whole dataset, whichever worker saw which part.
  EXPECT_NEAR(result.history[0].train_loss, expected.history[0].train_loss, 1e-4);
  EXPECT_EQ(result.history[0].train_examples, 50);
  EXPECT_EQ(result.history[0].validation_metric("accuracy"),
            expected.history[0].validation_metric("accuracy"));
  EXPECT_NEAR(result.history[0].validation_loss, expected.history[0].validation_loss, 1e-5);
  // Each step's loss is the global batch's, not this process's share: the
  // one device's, step by step.
  ASSERT_EQ(losses.size(), 5u);
  ASSERT_EQ(expected_losses.size(), 5u);
  for (size_t i = 0; i < losses.size(); ++i)
    EXPECT_NEAR(losses[i], expected_losses[i], 1e-5 * std::abs(expected_losses[i])) << "step " << i;
}

// A replica in the last process sleeps in every forward pass: every
// process's step breakdown lists all replicas, names the slow one by its own
// compute, and counts the others' wait as idle rather than communication.
// The sleep is long against what a loaded machine adds to a transfer (a
// descheduled process once took 10.5 ms), so the checks below keep a wide
// margin on both sides.
constexpr auto kStragglerDelay = std::chrono::milliseconds(60);
class SlowLastProcess : public nn::Module {
 public:
  explicit SlowLastProcess(std::shared_ptr<nn::Module> inner) : inner_(inner) {
    register_module("inner", std::move(inner));
  }
  Variable forward(const Variable& x) override {
    if (is_training() && comm::mpi_world_rank() == comm::mpi_world_size() - 1)
      std::this_thread::sleep_for(kStragglerDelay);
    return inner_->forward(x);
  }
  std::string describe() const override { return "SlowLastProcess"; }

 private:
  std::shared_ptr<nn::Module> inner_;
};

TEST(MultiWorkerTiming, ARemoteStragglerIsNamedNotHiddenInCommunication) {
  const data::FashionMnist fashion = data::load_fashion_mnist(TANDEM_FASHION_MNIST_DIR);
  const data::Dataset train =
      data::as_dataset({fashion.train.images.slice(0, 96), fashion.train.labels.slice(0, 96)});
  const int processes = comm::mpi_world_size();
  train::TrainConfig c{.epochs = 1,
                       .batch_size = 16,
                       .engine = {.seed = 5},
                       .schedule = optim::ScheduleKind::constant};
  c.strategy = {.kind = distribute::StrategyKind::multi_worker,
                .devices = 1,
                .threads_per_device = 1,
                .allow_oversubscription = true};
  train::Trainer trainer(
      c, train::custom_model("slow mlp", [] {
        return std::make_shared<SlowLastProcess>(nn::make_model("mlp", {.seed = 3}));
      }));
  // Medians over the steps: on a loaded machine (CTest runs two jobs on two
  // cores) a process can be descheduled during a step's all-reduce.
  std::vector<double> slow_minus_fast, communication, fast_idle, bucket_seconds;
  int steps = 0;
  trainer.fit(train, {}, {.on_step = [&](const train::StepInfo& s) {
                ++steps;
                ASSERT_EQ(s.replicas.size(), static_cast<size_t>(processes));
                const train::ReplicaStepTime& slow = s.replicas.back();
                EXPECT_EQ(slow.replica, processes - 1);
                // Bucket times start once every rank has arrived (the MPI call check),
                // so the fast process's buckets do not include the straggler's delay,
                // but they do include the transfer itself.
                for (const auto& b : s.buckets) bucket_seconds.push_back(b.seconds);
                for (const train::ReplicaStepTime& r : s.replicas) {
                  communication.push_back(r.communication);
                  if (r.replica == slow.replica) continue;
                  slow_minus_fast.push_back(slow.forward - r.forward);
                  fast_idle.push_back(r.idle);
                }
              }});
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  EXPECT_GT(median(slow_minus_fast), 0.045);
  EXPECT_GT(median(fast_idle), 0.030);
  // Counted as communication, the straggler's 60 ms would put every wait
  // above 60 ms; the transfer alone is about 1 ms, and under load it was
  // once 10.5 ms (a median over the steps).
  EXPECT_LT(median(communication), 0.030);
  ASSERT_FALSE(bucket_seconds.empty());
  EXPECT_LT(median(bucket_seconds), 0.030);
  EXPECT_GT(median(bucket_seconds), 1e-6);
  EXPECT_EQ(steps, 6);
}

std::string rank_dir(const std::string& name) {
  // Each process writes its own copy of the (deterministic) files.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("tandem_mpi_" + name + "_" + std::to_string(comm::mpi_world_rank()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

train::TrainConfig file_config(const std::string& strategy, const std::string& optimizer) {
  train::TrainConfig c = testing::equivalence_config(strategy, 1, optimizer);
  // Element-wise sharding: the processes' batches are the one-device ones.
  c.auto_shard = data::AutoShardPolicy::data;
  return c;
}

class MultiWorkerFiles : public ::testing::TestWithParam<std::string> {};

TEST_P(MultiWorkerFiles, CsvRegressionMatchesOneDevice) {
  const std::string csv =
      testing::write_regression_csv(rank_dir("csv_" + GetParam()) + "/train.csv", 200, 4, 1);
  const data::Dataset rows = testing::regression_csv_dataset(csv, 4);
  const auto model = train::custom_model("regression", [] {
    Generator g(4);
    auto m = std::make_shared<nn::Sequential>();
    m->emplace<nn::Linear>(4, 16, nn::LinearOptions{.activation = kernels::Activation::relu}, g)
        .emplace<nn::Linear>(16, 1, nn::LinearOptions{}, g);
    return m;
  });
  auto c = file_config("one_device", GetParam());
  c.input_feature = "x";
  c.loss = train::make_loss("mean_squared_error", {.labels = "y"});
  c.metrics = {train::make_metric("rmse", {.labels = "y"})};
  train::Trainer single(c, model);
  const train::TrainResult one = single.fit(rows, rows);
  auto m = c;
  m.strategy.kind = distribute::StrategyKind::multi_worker;
  train::Trainer workers(m, model);
  const train::TrainResult all = workers.fit(rows, rows);
  expect_same_parameters(single, workers, "csv regression");
  EXPECT_NEAR(all.history.back().train_loss, one.history.back().train_loss, 1e-6);
  EXPECT_NEAR(all.history.back().validation_metric("rmse"),
              one.history.back().validation_metric("rmse"), 1e-6);
  // Shuffled (reshuffled every epoch): the workers keep their shares of
  // the one order (the shards used to be shuffled each on its own).
  const data::Dataset shuffled = rows.shuffle(64, 9);
  train::Trainer single_shuffled(c, model);
  single_shuffled.fit(shuffled);
  train::Trainer workers_shuffled(m, model);
  workers_shuffled.fit(shuffled);
  expect_same_parameters(single_shuffled, workers_shuffled, "shuffled csv regression");
}

TEST_P(MultiWorkerFiles, JpegTfrecordClassifierMatchesOneDevice) {
  const data::FashionMnist fashion = data::load_fashion_mnist(TANDEM_FASHION_MNIST_DIR);
  const std::vector<std::string> shards = testing::write_jpeg_tfrecords(
      rank_dir("jpeg_" + GetParam()),
      {fashion.train.images.slice(0, 100), fashion.train.labels.slice(0, 100)}, {40, 35, 25});
  const data::Dataset examples = testing::jpeg_tfrecord_dataset(shards);
  const auto c = file_config("one_device", GetParam());
  train::Trainer single(c, train::builtin_model("mlp", precision::Policy::float32, 2));
  const train::TrainResult one = single.fit(examples, examples);
  auto m = c;
  m.strategy.kind = distribute::StrategyKind::multi_worker;
  train::Trainer workers(m, train::builtin_model("mlp", precision::Policy::float32, 2));
  const train::TrainResult all = workers.fit(examples, examples);
  expect_same_parameters(single, workers, "jpeg tfrecord");
  EXPECT_EQ(all.history.back().validation_metric("accuracy"),
            one.history.back().validation_metric("accuracy"));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, MultiWorkerFiles, ::testing::Values("sgd", "adam"));

// FILE sharding of shards of 1,000 and 700 examples over 2 workers: the
// second runs out 6 steps early and takes part with empty batches; nothing
// hangs, every example is trained on exactly once, each step's loss is over
// the examples present.
TEST(MultiWorkerUneven, FileShardsOfDifferentSizesTrainEveryExampleOnce) {
  ASSERT_EQ(comm::mpi_world_size(), 2) << "this test runs under mpirun -np 2";
  const data::FashionMnist fashion = data::load_fashion_mnist(TANDEM_FASHION_MNIST_DIR);
  const std::vector<std::string> shards = testing::write_jpeg_tfrecords(
      rank_dir("uneven"),
      {fashion.train.images.slice(0, 1700), fashion.train.labels.slice(0, 1700)}, {1000, 700});
  std::vector<int64_t> seen(1700, 0);
  const data::Dataset examples =
      testing::jpeg_tfrecord_dataset(shards).map([&seen](data::Element e) {
        ++seen.at(static_cast<size_t>(e.at("id").to_ints()[0]));
        return e;
      });
  train::TrainConfig c{.epochs = 1,
                       .batch_size = 100,
                       .engine = {.seed = 5},
                       .schedule = optim::ScheduleKind::constant};
  c.strategy = {.kind = distribute::StrategyKind::multi_worker,
                .devices = 1,
                .threads_per_device = 1,
                .allow_oversubscription = true};
  c.auto_shard = data::AutoShardPolicy::file;
  train::Trainer workers(c, train::builtin_model("mlp", precision::Policy::float32, 2));
  EXPECT_EQ(workers.steps_per_epoch(examples), 20);  // the longer shard's 1000 / 50
  std::vector<int64_t> batch_examples;
  std::vector<double> losses;
  const train::TrainResult r = workers.fit(examples, {}, {.on_step = [&](const train::StepInfo& s) {
                                             batch_examples.push_back(s.batch_examples);
                                             losses.push_back(s.loss);
                                           }});
  ASSERT_EQ(batch_examples.size(), 20u);
  for (size_t i = 0; i < 20; ++i)
    EXPECT_EQ(batch_examples[i], i < 14 ? 100 : 50) << "step " << i + 1;
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_EQ(r.history.at(0).train_examples, 1700);
  const std::vector<int64_t> total = distribute::sum_over_processes(workers.strategy(), seen);
  for (size_t id = 0; id < total.size(); ++id) ASSERT_EQ(total[id], 1) << "example " << id;
  // Both processes hold the same parameters.
  std::vector<double> sums;
  for (const auto& [name, p] : workers.model().named_parameters()) {
    double s = 0.0;
    for (float v : p.value().to_floats()) s += v;
    sums.push_back(s);
  }
  const std::vector<double> chief = distribute::broadcast_from_chief(workers.strategy(), sums);
  EXPECT_EQ(chief, sums);
}

// The first `count` Fashion-MNIST training examples, trained by one device
// per process with DATA sharding under `c`; the examples of each step and
// the result.
struct ShardedRun {
  std::vector<int64_t> batch_examples;
  train::TrainResult result;
  int64_t steps_per_epoch = 0;
};
ShardedRun train_data_sharded(int64_t count, train::TrainConfig c) {
  const data::FashionMnist fashion = data::load_fashion_mnist(TANDEM_FASHION_MNIST_DIR);
  const data::Dataset examples = data::as_dataset(
      {fashion.train.images.slice(0, count), fashion.train.labels.slice(0, count)});
  c.engine.seed = 5;
  c.schedule = optim::ScheduleKind::constant;
  c.strategy = {.kind = distribute::StrategyKind::multi_worker,
                .devices = 1,
                .threads_per_device = 1,
                .allow_oversubscription = true};
  c.auto_shard = data::AutoShardPolicy::data;
  train::Trainer workers(c, train::builtin_model("mlp", precision::Policy::float32, 2));
  ShardedRun run;
  run.steps_per_epoch = workers.steps_per_epoch(examples);
  run.result = workers.fit(examples, {}, {.on_step = [&](const train::StepInfo& s) {
                             run.batch_examples.push_back(s.batch_examples);
                           }});
  return run;
}

// drop_remainder drops the job's remainder, not each process's: 11
// examples in global batches of 4 over 2 processes (6 and 5 each) are 2
// steps of 4; each process dropping its own odd example gave a third step
// of 2 (and 3 steps an epoch for the schedules).
TEST(MultiWorkerUneven, DropRemainderDropsTheJobsRemainder) {
  ASSERT_EQ(comm::mpi_world_size(), 2) << "this test runs under mpirun -np 2";
  const ShardedRun run =
      train_data_sharded(11, {.epochs = 2, .batch_size = 4, .drop_remainder = true});
  EXPECT_EQ(run.steps_per_epoch, 2);
  EXPECT_EQ(run.batch_examples, (std::vector<int64_t>{4, 4, 4, 4}));
  ASSERT_EQ(run.result.history.size(), 2u);
  for (const train::EpochResult& e : run.result.history) EXPECT_EQ(e.train_examples, 8);
}

// Repeated data: the next pass starts when every process's has ended. 9
// examples over 2 processes (5 and 4, 2 per process a step) are steps of 4,
// 4 and 1 in every pass, as on one device; the process with the shorter
// shard started its next pass at step 3 (a batch of 3 from two passes, 11
// examples in the first epoch).
TEST(MultiWorkerUneven, RepeatedDataStartsEachPassTogether) {
  ASSERT_EQ(comm::mpi_world_size(), 2) << "this test runs under mpirun -np 2";
  const ShardedRun run =
      train_data_sharded(9, {.epochs = 3, .batch_size = 4, .steps_per_epoch = 3, .repeat = true});
  EXPECT_EQ(run.batch_examples, (std::vector<int64_t>{4, 4, 1, 4, 4, 1, 4, 4, 1}));
  ASSERT_EQ(run.result.history.size(), 3u);
  for (const train::EpochResult& e : run.result.history) EXPECT_EQ(e.train_examples, 9);
}

// A worker that fails before the first collective, or while reading its
// input, stops every worker with an error naming it, instead of leaving the
// others waiting.
TEST(MultiWorkerFailures, AFailingWorkerStopsEveryWorkerWithAnError) {
  const int rank = comm::mpi_world_rank();
  train::TrainConfig c{.epochs = 1, .batch_size = 8, .schedule = optim::ScheduleKind::constant};
  c.strategy = {.kind = distribute::StrategyKind::multi_worker,
                .devices = 1,
                .threads_per_device = 1,
                .allow_oversubscription = true};
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string build = message([&] {
    train::Trainer t(c, train::custom_model("mlp", [rank] {
                       if (rank == 1) TANDEM_THROW(IoError, "rank 1 cannot read its model");
                       return nn::make_model("mlp", {.seed = 1});
                     }));
  });
  EXPECT_NE(build.find(rank == 1 ? "rank 1 cannot read its model" : "another worker failed"),
            std::string::npos)
      << build;

  const data::FashionMnist fashion = data::load_fashion_mnist(TANDEM_FASHION_MNIST_DIR);
  const data::Dataset examples =
      data::as_dataset({fashion.train.images.slice(0, 64), fashion.train.labels.slice(0, 64)})
          .map([rank, seen = std::make_shared<int>(0)](data::Element e) {
            if (rank == 1 && ++*seen == 20) TANDEM_THROW(IoError, "rank 1's file is corrupt");
            return e;
          });
  train::Trainer t(c, train::builtin_model("mlp", precision::Policy::float32, 1));
  const std::string input = message([&] { t.fit(examples); });
  EXPECT_NE(input.find(rank == 1 ? "rank 1's file is corrupt"
                                 : "worker 1 failed reading its training input"),
            std::string::npos)
      << input;
}

// gpt and resnet (synchronised BN) over processes take the one-device steps:
// each process steps its own rows of the global batch, and also the whole
// batch on one device, and compares every parameter.
// The multi-worker side may shard (ZeRO), accumulate micro-batches and hold
// several replicas per process (hierarchical collectives).
struct WorkerSetup {
  int devices = 1;
  int zero_stage = 0;
  int accumulation_steps = 1;
  optim::OptimizerConfig optimizer{.kind = optim::OptimizerKind::sgd, .learning_rate = 0.1};
};

void expect_multi_worker_matches_one_device(
    const std::string& model, const distribute::ModelBuilder& build,
    const std::function<data::Element(int64_t step)>& global_batch,
    const distribute::ForwardFn& forward, const WorkerSetup& setup = {}) {
  const distribute::EngineOptions options{.optimizer = setup.optimizer};
  auto one_device = distribute::make_strategy(
      {.kind = distribute::StrategyKind::one_device, .threads_per_device = 1});
  auto workers = distribute::make_strategy({.kind = distribute::StrategyKind::multi_worker,
                                            .devices = setup.devices,
                                            .threads_per_device = 1,
                                            .allow_oversubscription = true});
  auto one = one_device->make_engine(build, options);
  // Small buckets: several per model, padded for the replica count.
  auto many = workers->make_engine(build, {.optimizer = setup.optimizer,
                                           .reducer = {.bucket_bytes = 16 << 10,
                                                       .first_bucket_bytes = 4 << 10,
                                                       .zero_stage = setup.zero_stage},
                                           .accumulation_steps = setup.accumulation_steps});
  // Under ZeRO, the same workers without it as well: the two agree more
  // closely than either with one device (the same reduction order).
  std::unique_ptr<distribute::Strategy> plain_workers;
  std::unique_ptr<distribute::Engine> plain;
  if (setup.zero_stage > 0) {
    plain_workers = distribute::make_strategy({.kind = distribute::StrategyKind::multi_worker,
                                               .devices = setup.devices,
                                               .threads_per_device = 1,
                                               .allow_oversubscription = true});
    plain = plain_workers->make_engine(
        build, {.optimizer = setup.optimizer,
                .reducer = {.bucket_bytes = 16 << 10, .first_bucket_bytes = 4 << 10},
                .accumulation_steps = setup.accumulation_steps});
  }
  const int64_t p = comm::mpi_world_rank(), processes = comm::mpi_world_size();
  for (int64_t step = 0; step < 3; ++step) {
    const data::Element whole = global_batch(step);
    const int64_t rows = whole.features().front().second.dim(0);
    data::Element mine;
    for (const auto& [name, t] : whole.features())
      mine.set(name, t.slice(rows * p / processes, rows * (p + 1) / processes).clone());
    const double a = one->step(whole, forward, {.step = step}).loss;
    const double b = many->step(mine, forward, {.step = step, .global_rows = rows}).loss;
    EXPECT_NEAR(a, b, 1e-5 * std::abs(a)) << model << " step " << step;
    if (plain) plain->step(mine, forward, {.step = step, .global_rows = rows});
  }
  for (int r = 0; plain && r < setup.devices; ++r) {
    const auto pz = many->model(r).named_parameters(), pp = plain->model(r).named_parameters();
    for (size_t i = 0; i < pz.size(); ++i) {
      EXPECT_LT(relative_error(pp[i].second.value().to_floats(), pz[i].second.value().to_floats()),
                1e-6)
          << model << " " << pz[i].first << ": ZeRO against plain on local replica " << r;
    }
  }
  const auto pa = one->model().named_parameters();
  for (int r = 0; r < setup.devices; ++r) {
    const auto pb = many->model(r).named_parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_LT(relative_error(pa[i].second.value().to_floats(), pb[i].second.value().to_floats()),
                1e-5)
          << model << " " << pa[i].first << " on local replica " << r;
    }
  }
}

distribute::ModelBuilder builtin(const std::string& model, const std::string& settings) {
  return [=] { return nn::make_model(model, {.seed = 4, .settings = settings}); };
}

TEST(MultiWorkerModels, GptMatchesOneDevice) {
  expect_multi_worker_matches_one_device(
      "gpt", builtin("gpt", "layers=2,width=32,heads=4,context=16"),
      [](int64_t step) { return testing::token_batch(step); }, testing::language_model_loss);
}

TEST(MultiWorkerModels, ResnetWithSynchronisedBatchNormMatchesOneDevice) {
  expect_multi_worker_matches_one_device(
      "resnet", builtin("resnet", "width=8,sync_bn=true"),
      [](int64_t step) { return testing::image_batch(step, 6); }, testing::image_classifier_loss);
}

// ZeRO stages and gradient accumulation across processes (gpt has no
// batch-dependent layer, so micro-batches take the whole batch's step).
class MultiWorkerZero : public ::testing::TestWithParam<std::tuple<int, int, int, std::string>> {};

TEST_P(MultiWorkerZero, ShardedAndAccumulatedTrainingMatchesOneDevice) {
  const auto [stage, devices, accumulation, optimizer] = GetParam();
  WorkerSetup setup{.devices = devices, .zero_stage = stage, .accumulation_steps = accumulation};
  if (optimizer == "sgd") {
    expect_multi_worker_matches_one_device(
        "gpt", builtin("gpt", "layers=2,width=32,heads=4,context=16"),
        [](int64_t step) { return testing::token_batch(step, 8); }, testing::language_model_loss,
        setup);
    return;
  }
  // Adam turns rounding noise in a gradient that is zero in exact
  // arithmetic (gpt's key biases: softmax ignores a shift of every score)
  // into unit-size steps, so it is checked on a small classifier.
  setup.optimizer = {.kind = optim::OptimizerKind::adamw, .learning_rate = 0.01};
  const distribute::ModelBuilder classifier = [] {
    Generator g(8);
    auto m = std::make_shared<nn::Sequential>();
    m->emplace<nn::Flatten>()
        .emplace<nn::Linear>(144, 37, nn::LinearOptions{.activation = kernels::Activation::relu}, g)
        .emplace<nn::Linear>(37, 10, nn::LinearOptions{}, g);
    return std::static_pointer_cast<nn::Module>(m);
  };
  expect_multi_worker_matches_one_device(
      "classifier", classifier, [](int64_t step) { return testing::image_batch(step, 8); },
      testing::image_classifier_loss, setup);
}

INSTANTIATE_TEST_SUITE_P(
    Stages, MultiWorkerZero,
    ::testing::Values(std::make_tuple(1, 1, 1, "sgd"), std::make_tuple(2, 1, 1, "adamw"),
                      std::make_tuple(1, 2, 1, "adamw"), std::make_tuple(2, 2, 1, "sgd"),
                      std::make_tuple(2, 2, 2, "adamw"), std::make_tuple(0, 2, 2, "sgd")),
    [](const ::testing::TestParamInfo<std::tuple<int, int, int, std::string>>& p) {
      return "zero" + std::to_string(std::get<0>(p.param)) + "_" +
             std::to_string(std::get<1>(p.param)) + "devices_" +
             std::to_string(std::get<2>(p.param)) + "micro_" + std::get<3>(p.param);
    });

INSTANTIATE_TEST_SUITE_P(Devices, MultiWorkerTest,
                         ::testing::Combine(::testing::Values(1, 2),
                                            ::testing::Values("mlp", "cnn")));

}  // namespace
}  // namespace tandem
