// The batch-size finder: its largest fitting batch is the true largest
// (a run at it stays within the limit, one at twice it does not), its
// series and recommendation follow the formula, and bad settings are errors.
#include <gtest/gtest.h>

#include <cmath>

#include "support/test_data.h"
#include "tandem/base/error.h"
#include "tandem/tensor/allocator.h"
#include "tandem/tune/batch_size_finder.h"

namespace tandem {
namespace {

data::Dataset head(int64_t n) {
  const data::LabeledImages& f = testing::fashion().train;
  return data::as_dataset({f.images.slice(0, n), f.labels.slice(0, n)});
}

train::TrainConfig config() {
  train::TrainConfig c{.epochs = 5, .batch_size = 32, .schedule = optim::ScheduleKind::constant};
  c.strategy = {.kind = distribute::StrategyKind::mirrored,
                .devices = 2,
                .threads_per_device = 1,
                .allow_oversubscription = true};
  return c;
}

// The measured peak (beyond what the devices held before) of a short run.
int64_t measured_peak(const train::TrainConfig& base, int64_t batch) {
  train::TrainConfig c = base;
  c.batch_size = batch;
  c.epochs = 1;
  c.steps_per_epoch = 2;
  const data::Dataset data = head(4096).repeat();
  // What the devices held before the run (the test's loaded data) is not its.
  std::vector<int64_t> before;
  for (int r = 0; r < 2; ++r) {
    before.push_back(allocator_for(cpu_device(r)).stats().current_total_bytes);
    allocator_for(cpu_device(r)).reset_high_water();
  }
  {
    train::Trainer trainer(c, train::builtin_model("cnn"));
    trainer.fit(data);
  }
  int64_t peak = 0;
  for (int r = 0; r < 2; ++r) {
    peak = std::max(peak, allocator_for(cpu_device(r)).stats().high_water_total_bytes -
                              before[static_cast<size_t>(r)]);
  }
  return peak;
}

TEST(BatchSizeFinder, TheLargestFittingBatchIsTheTrueLargest) {
  // A limit between a run's model state and a large batch's activations.
  const int64_t limit = 24 << 20;
  const tune::BatchSizeRecommendation r =
      tune::find_batch_size({.model = train::builtin_model("cnn"),
                             .config = config(),
                             .train = head(4096),
                             .memory_limit = limit,
                             .max_batch = 64,
                             .timed_steps = 2,
                             .warmup_steps = 1,
                             .noise_steps = 20});
  const int64_t largest = r.largest_fitting_batch;
  ASSERT_GT(largest, 64);
  ASSERT_LT(largest, 4096);
  EXPECT_EQ(largest % 2, 0);
  // A run at it holds at most the limit on each device (its own state
  // included); a run at twice it needs more.
  const int64_t at_largest = measured_peak(config(), largest);
  const int64_t at_twice = measured_peak(config(), 2 * largest);
  EXPECT_LE(at_largest, limit) << "batch " << largest;
  EXPECT_GT(at_twice, limit) << "batch " << 2 * largest;
  // The series: 8 per replica, doubling up to --max-batch.
  ASSERT_EQ(r.trials.size(), 3u);
  EXPECT_EQ(r.trials[0].batch, 16);
  EXPECT_EQ(r.trials[2].batch, 64);
  double best = 1e300;
  for (const tune::BatchSizeTrial& t : r.trials) {
    EXPECT_GT(t.examples_per_second, 0.0);
    EXPECT_GE(t.relative_time, 1.0);
    best = std::min(best, t.relative_time);
  }
  EXPECT_EQ(best, 1.0);
  EXPECT_TRUE(std::isfinite(r.noise_scale));
  // The recommendation is the best trial, its rate scaled linearly (sgd)
  // from the run's batch of 32.
  for (const tune::BatchSizeTrial& t : r.trials) {
    if (t.relative_time == 1.0) {
      EXPECT_EQ(r.batch, t.batch);
    }
  }
  EXPECT_EQ(r.lr_scaling, "linear");
  EXPECT_EQ(r.reference_batch, 32);
  EXPECT_DOUBLE_EQ(r.learning_rate, 0.05 * static_cast<double>(r.batch) / 32.0);
}

TEST(BatchSizeFinder, ALimitBelowTheModelStateIsAClearError) {
  try {
    tune::find_batch_size({.model = train::builtin_model("cnn"),
                           .config = config(),
                           .train = head(256),
                           .memory_limit = 1 << 20});
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("Not even one example per replica fits"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(tune::find_batch_size({.model = train::builtin_model("cnn"),
                                      .config = config(),
                                      .train = head(256),
                                      .memory_limit = 1 << 30,
                                      .timed_steps = 0}),
               InvalidArgument);
}

}  // namespace
}  // namespace tandem
