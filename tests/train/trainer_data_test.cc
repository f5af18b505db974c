// The Trainer on data users bring: a regression on a CSV file and a
// classifier on TFRecord shards of JPEG images train with mirrored replicas
// to the parameters one device reaches; epochs of a fixed number of steps
// over repeated data; metrics over replicas; losses and features by name;
// data that cannot work.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "support/equivalence.h"
#include "support/reference.h"
#include "support/test_data.h"
#include "support/test_files.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/sequential.h"
#include "tandem/train/trainer.h"

namespace tandem {
namespace {

using testing::equivalence_config;
using testing::expect_same_parameters;

namespace fs = std::filesystem;
using testing::fashion;

std::string dir_for(const std::string& name) {
  const fs::path dir = fs::path(TANDEM_TEST_TMPDIR) / ("trainer_data_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

train::ModelFactory regression_model() {
  return train::custom_model("regression", [] {
    Generator g(4);
    auto m = std::make_shared<nn::Sequential>();
    m->emplace<nn::Linear>(4, 16, nn::LinearOptions{.activation = kernels::Activation::relu}, g)
        .emplace<nn::Linear>(16, 1, nn::LinearOptions{}, g);
    return m;
  });
}

class OnFiles : public ::testing::TestWithParam<std::string> {};

TEST_P(OnFiles, RegressionOnCsvMatchesOneDevice) {
  set_num_threads(1);
  const std::string csv =
      testing::write_regression_csv(dir_for("csv_" + GetParam()) + "/train.csv", 200, 4, 1);
  const data::Dataset rows = testing::regression_csv_dataset(csv, 4).shuffle(200, 3);
  auto c = equivalence_config("one_device", 1, GetParam());
  c.input_feature = "x";
  c.loss = train::make_loss("mean_squared_error", {.labels = "y"});
  c.metrics = {train::make_metric("mae", {.labels = "y"}),
               train::make_metric("rmse", {.labels = "y"})};
  train::Trainer single(c, regression_model());
  const train::TrainResult one = single.fit(rows, rows);
  auto m = c;
  m.strategy = equivalence_config("mirrored", 2, GetParam()).strategy;
  train::Trainer mirrored(m, regression_model());
  const train::TrainResult two = mirrored.fit(rows, rows);
  expect_same_parameters(single, mirrored, "csv regression");  // 2 epochs x 17 steps
  ASSERT_EQ(two.history.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    EXPECT_NEAR(two.history[e].train_loss, one.history[e].train_loss, 1e-6);
    EXPECT_NEAR(two.history[e].validation_metric("rmse"), one.history[e].validation_metric("rmse"),
                1e-6);
    EXPECT_EQ(two.history[e].train_examples, 200);
  }
  const train::EpochResult& last = two.history.back();
  EXPECT_LT(last.train_loss, 0.5 * two.history.front().train_loss + 0.01);
  EXPECT_GE(last.validation_metric("rmse"), last.validation_metric("mae"));
  // The metric and the loss sum the same f32 squared errors in different
  // orders (the kernels' vector width varies by CPU): equal to f32 rounding.
  EXPECT_NEAR(last.validation_metric("rmse"), std::sqrt(last.validation_loss),
              1e-7 * std::sqrt(last.validation_loss));
}

TEST_P(OnFiles, JpegTfrecordClassifierMatchesOneDevice) {
  set_num_threads(1);
  const data::LabeledImages images{fashion().train.images.slice(0, 100),
                                   fashion().train.labels.slice(0, 100)};
  const std::vector<std::string> shards =
      testing::write_jpeg_tfrecords(dir_for("jpeg_" + GetParam()), images, {40, 35, 25});
  const data::Dataset examples = testing::jpeg_tfrecord_dataset(shards);
  auto c = equivalence_config("one_device", 1, GetParam());
  c.metrics = {train::make_metric("accuracy"), train::make_metric("top3_accuracy")};
  train::Trainer single(c, train::builtin_model("mlp", precision::Policy::float32, 2));
  const train::TrainResult one = single.fit(examples, examples);
  for (int devices : {2, 3}) {
    auto m = c;
    m.strategy = equivalence_config("mirrored", devices, GetParam()).strategy;
    train::Trainer mirrored(m, train::builtin_model("mlp", precision::Policy::float32, 2));
    const train::TrainResult r = mirrored.fit(examples, examples);
    expect_same_parameters(single, mirrored,
                           "jpeg tfrecord on " + std::to_string(devices) + " replicas");
    // Counts are exact whichever replica saw which example.
    EXPECT_EQ(r.history.back().validation_metric("accuracy"),
              one.history.back().validation_metric("accuracy"));
    EXPECT_EQ(r.history.back().train_metric("top3_accuracy"),
              one.history.back().train_metric("top3_accuracy"));
  }
  // The decoded JPEGs are Fashion-MNIST: the model learns from them.
  EXPECT_GT(one.history.back().validation_metric("accuracy"), 0.5);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, OnFiles, ::testing::Values("sgd", "adam"));

std::vector<double> step_losses(train::Trainer& t, const data::Dataset& d,
                                train::TrainResult* result = nullptr, int64_t stop_at = -1) {
  std::vector<double> losses;
  const train::TrainResult r = t.fit(d, {}, {.on_step = [&](const train::StepInfo& s) {
                                       losses.push_back(s.loss);
                                       if (s.global_step == stop_at) t.request_stop();
                                     }});
  if (result) *result = r;
  return losses;
}

data::Dataset head(int64_t n) {
  return data::as_dataset({fashion().train.images.slice(0, n), fashion().train.labels.slice(0, n)});
}

// Keras's steps_per_epoch: epochs of 5 steps from one pass over repeated
// data, which a resume continues where it stopped.
TEST(Trainer, StepsPerEpochRunsOneContinuingPassOverRepeatedData) {
  set_num_threads(1);
  const data::Dataset repeated = head(96).shuffle(96, 1).repeat();
  auto c = equivalence_config("one_device", 1, "adam");
  c.epochs = 3;
  c.steps_per_epoch = 5;
  c.schedule = optim::ScheduleKind::cosine;  // measured in steps_per_epoch
  train::Trainer plain(c, train::builtin_model("mlp"));
  train::TrainResult full;
  const std::vector<double> expected = step_losses(plain, repeated, &full);
  ASSERT_EQ(expected.size(), 15u);
  ASSERT_EQ(full.history.size(), 3u);
  EXPECT_EQ(full.history[1].train_examples, 60);
  EXPECT_FALSE(full.input_exhausted);

  c.output_dir = dir_for("steps_per_epoch");
  std::vector<double> losses;
  {
    train::Trainer first(c, train::builtin_model("mlp"));
    train::TrainResult r;
    losses = step_losses(first, repeated, &r, /*stop_at=*/7);
    EXPECT_TRUE(r.interrupted);
  }
  c.resume = true;
  train::Trainer second(c, train::builtin_model("mlp"));
  const std::vector<double> rest = step_losses(second, repeated);
  losses.insert(losses.end(), rest.begin(), rest.end());
  EXPECT_EQ(losses, expected);
}

TEST(Trainer, DataRunningOutBeforeStepsPerEpochEndsTheRun) {
  auto c = equivalence_config("one_device", 1, "sgd");
  c.epochs = 4;
  c.steps_per_epoch = 5;
  train::Trainer t(c, train::builtin_model("mlp"));
  train::TrainResult r;
  const std::vector<double> losses = step_losses(t, head(84), &r);  // 7 batches
  EXPECT_TRUE(r.input_exhausted);
  EXPECT_EQ(losses.size(), 7u);
  ASSERT_EQ(r.history.size(), 2u);  // 5 steps, then 2 before the data ended
  EXPECT_EQ(r.history[1].train_examples, 24);
}

TEST(Trainer, DataThatCannotWorkIsAClearError) {
  const auto error_of = [](train::TrainConfig c, const data::Dataset& d) {
    try {
      train::Trainer(c, train::builtin_model("mlp")).fit(d);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto c = equivalence_config("one_device", 1, "sgd");
  auto wrong_input = c;
  wrong_input.input_feature = "pixels";
  EXPECT_NE(error_of(wrong_input, head(24)).find("no feature 'pixels'"), std::string::npos);
  auto wrong_label = c;
  wrong_label.loss = train::make_loss("softmax_cross_entropy", {.labels = "class"});
  EXPECT_NE(error_of(wrong_label, head(24)).find("no feature 'class'"), std::string::npos);
  EXPECT_NE(error_of(c, head(24).take(0)).find("the training set has no examples"),
            std::string::npos);
  // Fewer examples than a batch: one partial batch an epoch, as Keras; with
  // drop_remainder no step would run.
  auto dropping = c;
  dropping.drop_remainder = true;
  EXPECT_NE(error_of(dropping, head(c.batch_size - 1)).find("no step would run"),
            std::string::npos);
  EXPECT_EQ(error_of(c, head(c.batch_size - 1)), "no error");
  const data::Dataset filtered = head(24).filter([](const data::Element&) { return true; });
  EXPECT_NE(error_of(c, filtered.filter([](const data::Element&) {
              return false;
            })).find("yielded no batches"),
            std::string::npos);
  auto cosine = c;
  cosine.schedule = optim::ScheduleKind::cosine;
  EXPECT_NE(error_of(cosine, filtered).find("set steps_per_epoch"), std::string::npos);
  EXPECT_EQ(error_of(c, filtered), "no error");  // a constant rate needs no size
  auto regression = c;
  regression.loss = train::make_loss("mean_squared_error");
  regression.metrics.clear();  // accuracy scores classes (refused beside this loss)
  EXPECT_NE(error_of(regression, head(24)).find("(12, 10)"), std::string::npos);
  EXPECT_THROW(train::make_loss("hinge"), InvalidArgument);
  EXPECT_THROW(train::make_metric("f1"), InvalidArgument);
  EXPECT_THROW(train::make_loss("huber", {.delta = 0}), InvalidArgument);
}

// The main thread builds the batches between steps. It gets the replica's
// threads, not OpenMP's default of every core: under mpirun other processes
// use those cores, and the spinning workers of a 2-thread team there made
// each 2-host mlp step 4x slower (docs/performance.md).
TEST(Trainer, BatchesAreBuiltWithTheReplicasThreadsNotEveryCore) {
  set_num_threads(2);
  std::vector<int> seen;
  const data::Dataset d = head(48).map([&seen](data::Element e) {
    seen.push_back(num_threads());
    return e;
  });
  train::Trainer t(equivalence_config("one_device", 1, "sgd"), train::builtin_model("mlp"));
  t.fit(d);
  ASSERT_FALSE(seen.empty());
  for (int threads : seen) EXPECT_EQ(threads, 1);
  EXPECT_EQ(num_threads(), 2);  // restored after the run
  set_num_threads(1);
}

// Metrics over replicas are the metrics of the whole dataset, however the
// examples fell on the replicas (50 over 3 replicas, a batch of 2 at the end).
TEST(Trainer, EvaluationOverReplicasIsTheWholeDatasets) {
  set_num_threads(1);
  auto c = equivalence_config("one_device", 1, "sgd");
  c.eval_batch_size = 16;
  c.metrics = {train::make_metric("accuracy"), train::make_metric("top2_accuracy"),
               train::make_metric("perplexity")};
  train::Trainer single(c, train::builtin_model("mlp", precision::Policy::float32, 9));
  auto m = c;
  m.strategy = equivalence_config("mirrored", 3, "sgd").strategy;
  train::Trainer mirrored(m, train::builtin_model("mlp", precision::Policy::float32, 9));
  const data::Dataset d = head(50);
  const train::EvalResult a = single.evaluate(d), b = mirrored.evaluate(d);
  EXPECT_EQ(a.examples, 50);
  EXPECT_EQ(b.examples, 50);
  EXPECT_EQ(a.metric("accuracy"), b.metric("accuracy"));
  EXPECT_EQ(a.metric("top2_accuracy"), b.metric("top2_accuracy"));
  EXPECT_NEAR(a.loss, b.loss, 1e-6);
  EXPECT_NEAR(b.metric("perplexity"), std::exp(b.loss), 1e-4 * b.metric("perplexity"));
  EXPECT_GE(b.metric("top2_accuracy"), b.metric("accuracy"));
}

}  // namespace
}  // namespace tandem
