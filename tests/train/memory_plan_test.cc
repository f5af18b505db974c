// The memory planner against what training allocates: each device's
// predicted peak beside its allocator's high-water mark over a real fit(),
// for a CNN and for a small GPT under mixed precision, ZeRO-2 and
// recomputation; and the limit check's answer.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/model_batches.h"
#include "support/test_data.h"
#include "tandem/base/error.h"
#include "tandem/nn/models.h"
#include "tandem/tensor/allocator.h"
#include "tandem/train/memory_plan.h"
#include "tandem/train/trainer.h"

namespace tandem {
namespace {

struct Case {
  std::string name;
  train::ModelFactory model;
  train::TrainConfig config;
  data::Dataset train, validation;
  int64_t validation_examples;
};

// The strategy's replica layout, as the planner takes it.
distribute::StrategyLayout layout_of(distribute::Strategy& strategy) {
  return {.local_replicas = strategy.local_replicas(),
          .global_replicas = strategy.global_replicas(),
          .threads_per_replica = strategy.threads_per_replica()};
}

// What a device holds that is not the run's (the replicas are built: their
// parameters, gradients, optimizer state and communication buffers are).
int64_t held_before_the_run(const Device& device) {
  const MemoryStats s = allocator_for(device).stats();
  return s.current_total_bytes - s.current(MemoryCategory::parameters) -
         s.current(MemoryCategory::gradients) - s.current(MemoryCategory::optimizer_state) -
         s.current(MemoryCategory::communication);
}

// Trains one epoch and compares each device's measured peak (what the run
// added to what the device already held) with the plan's.
void expect_plan_matches_training(const Case& c, double tolerance) {
  SCOPED_TRACE(c.name);
  train::Trainer trainer(c.config, c.model);
  distribute::Strategy& strategy = trainer.strategy();
  const data::Element example = *c.train.take(1).iterator().next();
  const train::MemoryPlan plan = train::plan_memory({.model = c.model,
                                                     .config = trainer.config(),
                                                     .layout = layout_of(strategy),
                                                     .example = example,
                                                     .evaluates = true,
                                                     .validation_examples = c.validation_examples});
  std::vector<int64_t> before;
  for (int r = 0; r < strategy.local_replicas(); ++r) {
    before.push_back(held_before_the_run(strategy.device(r)));
    allocator_for(strategy.device(r)).reset_high_water();
  }
  trainer.fit(c.train, c.validation);
  ASSERT_EQ(plan.devices.size(), static_cast<size_t>(strategy.local_replicas()));
  for (int r = 0; r < strategy.local_replicas(); ++r) {
    const MemoryStats s = allocator_for(strategy.device(r)).stats();
    const double measured = static_cast<double>(s.high_water_total_bytes - before[r]);
    const double predicted = static_cast<double>(plan.devices[r].total(plan.micro_batch));
    EXPECT_NEAR(predicted / measured, 1.0, tolerance)
        << "device " << r << ": predicted " << predicted << " bytes, measured " << measured;
  }
}

TEST(MemoryPlan, PredictsTheMeasuredPeakOfEachDevice) {
  const data::LabeledImages& fashion = testing::fashion().train;
  const data::LabeledImages head{fashion.images.slice(0, 256), fashion.labels.slice(0, 256)};
  const data::LabeledImages tail{fashion.images.slice(256, 384), fashion.labels.slice(256, 384)};
  train::TrainConfig cnn{.epochs = 1, .batch_size = 64, .schedule = optim::ScheduleKind::constant};
  cnn.strategy = {.kind = distribute::StrategyKind::mirrored,
                  .devices = 2,
                  .threads_per_device = 1,
                  .allow_oversubscription = true};
  expect_plan_matches_training({"cnn", train::builtin_model("cnn"), cnn, data::as_dataset(head),
                                data::as_dataset(tail), 128},
                               0.05);

  // A small GPT, bf16, ZeRO-2 with small buckets, recomputed blocks.
  const data::Dataset sequences =
      data::Dataset::from_tensors(testing::token_batch(0, 48).features());
  train::TrainConfig gpt{.epochs = 1,
                         .batch_size = 8,
                         .eval_batch_size = 16,
                         .schedule = optim::ScheduleKind::constant};
  gpt.strategy = cnn.strategy;
  gpt.engine.optimizer = {.kind = optim::OptimizerKind::adamw, .learning_rate = 1e-3};
  gpt.engine.reducer = {.bucket_bytes = 64 << 10, .first_bucket_bytes = 16 << 10, .zero_stage = 2};
  gpt.input_feature = "tokens";
  gpt.loss = train::make_loss("softmax_cross_entropy", {.labels = "targets"});
  gpt.metrics = {};
  train::ModelFactory model =
      train::builtin_model("gpt", precision::Policy::mixed_bfloat16, 1, std::nullopt,
                           "layers=2,width=64,heads=4,context=16");
  model.build = [build = model.build] {
    auto m = build();
    m->recompute_blocks();
    return m;
  };
  expect_plan_matches_training({"gpt", model, gpt, sequences, sequences, 48}, 0.05);
}

// ZeRO lowers every device's peak, device 0's included, planned and
// measured over a run that writes checkpoints. Saving used to gather the
// whole optimizer state on device 0 (and the whole file in memory), which
// put ZeRO-1's peak there above the plain run's; it now streams one
// bucket's slot at a time into the file.
TEST(MemoryPlan, ZeroLowersEveryDevicesPeakWithCheckpoints) {
  // A GPT whose parameters (about 0.8 M, in buckets of 256 KiB) outweigh
  // its activations at this batch, so that the optimizer state decides.
  const data::Dataset train = data::Dataset::from_tensors(testing::token_batch(0, 32).features());
  const data::Element example = *train.take(1).iterator().next();
  const train::ModelFactory model = train::builtin_model(
      "gpt", precision::Policy::float32, 1, std::nullopt, "layers=4,width=128,heads=4,context=16");
  std::vector<double> planned, measured;
  for (int stage : {0, 1, 2}) {
    train::TrainConfig config{
        .epochs = 1, .batch_size = 8, .schedule = optim::ScheduleKind::constant};
    config.engine.optimizer = {.kind = optim::OptimizerKind::adam, .learning_rate = 1e-3};
    config.engine.reducer = {
        .bucket_bytes = 256 << 10, .first_bucket_bytes = 64 << 10, .zero_stage = stage};
    config.strategy = {.kind = distribute::StrategyKind::mirrored,
                       .devices = 2,
                       .threads_per_device = 1,
                       .allow_oversubscription = true};
    config.input_feature = "tokens";
    config.loss = train::make_loss("softmax_cross_entropy", {.labels = "targets"});
    config.metrics = {};
    config.output_dir = std::string(TANDEM_TEST_TMPDIR) + "/zero-peak-" + std::to_string(stage);
    std::filesystem::remove_all(config.output_dir);
    train::Trainer trainer(config, model);
    distribute::Strategy& strategy = trainer.strategy();
    const train::MemoryPlan plan = train::plan_memory({.model = model,
                                                       .config = trainer.config(),
                                                       .layout = layout_of(strategy),
                                                       .example = example,
                                                       .evaluates = false,
                                                       .writes_checkpoints = true});
    const Device device0 = strategy.device(0);
    const double held = static_cast<double>(held_before_the_run(device0));
    allocator_for(device0).reset_high_water();
    trainer.fit(train);
    measured.push_back(static_cast<double>(allocator_for(device0).stats().high_water_total_bytes) -
                       held);
    planned.push_back(static_cast<double>(plan.devices[0].total(plan.micro_batch)));
    EXPECT_NEAR(planned.back() / measured.back(), 1.0, 0.05) << "ZeRO-" << stage;
  }
  for (int stage : {1, 2}) {
    EXPECT_LT(measured[stage], measured[0]) << "ZeRO-" << stage << " measured on device 0";
    EXPECT_LT(planned[stage], planned[0]) << "ZeRO-" << stage << " planned on device 0";
  }
}

TEST(MemoryPlan, TheLimitNamesTheLargestPartAndTheLargestBatchThatFits) {
  train::TrainConfig config{.batch_size = 32, .micro_batch_size = 32};
  config.input_feature = "image";
  const train::MemoryPlan plan = train::plan_memory(
      {.model = train::builtin_model("cnn"),
       .config = config,
       .layout = {.threads_per_replica = 1},
       .example = {{"image", Tensor::zeros(Shape{28, 28, 1})},
                   {"label", Tensor::from_ints(Shape{}, std::vector<int32_t>{3})}},
       .evaluates = false});
  const int64_t peak = plan.peak(32);
  EXPECT_GT(peak, plan.peak(8));
  EXPECT_LT(peak, plan.peak(128));
  // Within its own peak it fits; a little less refuses with the numbers.
  EXPECT_NO_THROW(train::check_memory_limit(plan, peak));
  const int64_t fits = plan.largest_micro_batch(peak - 1);
  EXPECT_GE(fits, 16);
  EXPECT_LT(fits, 32);
  EXPECT_LE(plan.peak(fits), peak - 1);
  EXPECT_GT(plan.peak(fits + 1), peak - 1);
  try {
    train::check_memory_limit(plan, peak - 1);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("on cpu:0 exceeds the memory limit"), std::string::npos) << m;
    EXPECT_NE(m.find("the largest part is activations"), std::string::npos) << m;
    EXPECT_NE(m.find("The largest global batch that fits is " + std::to_string(fits)),
              std::string::npos)
        << m;
  }
  try {
    train::check_memory_limit(plan, 1024);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("Not even one example per replica fits"),
              std::string::npos)
        << e.what();
  }
  // Where the data held in memory fills the limit, the advice is about the
  // data, not the model (which it blamed).
  train::MemoryPlan resident = plan;
  for (train::DeviceMemoryPlan& d : resident.devices) {
    d.fixed[static_cast<int>(MemoryCategory::input)] += 2.0 * (1 << 30);
    d.steady_fixed += 2.0 * (1 << 30);
  }
  try {
    train::check_memory_limit(resident, int64_t{1} << 30);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the input held in memory"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(train::check_memory_limit(plan, 0), InvalidArgument);
}

TEST(MemoryPlan, ZeroShardsWhatItShardsInThePlan) {
  const auto plan_for = [](int stage) {
    train::TrainConfig config{.batch_size = 64, .micro_batch_size = 16};
    config.engine.optimizer = {.kind = optim::OptimizerKind::adam, .learning_rate = 1e-3};
    config.engine.reducer = {
        .bucket_bytes = 256 << 10, .first_bucket_bytes = 64 << 10, .zero_stage = stage};
    return train::plan_memory(
        {.model = train::builtin_model("mlp"),
         .config = config,
         .layout = {.local_replicas = 4, .global_replicas = 4, .threads_per_replica = 1},
         .example = {{"image", Tensor::zeros(Shape{28, 28, 1})},
                     {"label", Tensor::from_ints(Shape{}, std::vector<int32_t>{3})}},
         .evaluates = false});
  };
  const train::MemoryPlan plain = plan_for(0), one = plan_for(1), two = plan_for(2);
  const auto bytes = [](const train::MemoryPlan& p, MemoryCategory c) {
    return static_cast<double>(p.devices[1].bytes(c, p.micro_batch));
  };
  EXPECT_NEAR(
      bytes(one, MemoryCategory::optimizer_state) / bytes(plain, MemoryCategory::optimizer_state),
      0.25, 0.01);
  EXPECT_NEAR(bytes(one, MemoryCategory::gradients) / bytes(plain, MemoryCategory::gradients), 1.0,
              0.01);
  EXPECT_NEAR(bytes(two, MemoryCategory::gradients) / bytes(plain, MemoryCategory::gradients), 0.25,
              0.01);
  EXPECT_GT(bytes(two, MemoryCategory::communication), bytes(plain, MemoryCategory::communication));
}

}  // namespace
}  // namespace tandem
