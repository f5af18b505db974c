#include <gtest/gtest.h>

#include <atomic>
#include <cmath>

#include <filesystem>
#include <fstream>
#include <set>

#include "support/test_data.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/random.h"
#include "tandem/data/dataset.h"
#include "tandem/data/fashion_mnist.h"
#include "tandem/nn/dropout.h"
#include "tandem/nn/flatten.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/models.h"
#include "tandem/precision/loss_scaler.h"
#include "tandem/precision/policy.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/run_directory.h"
#include "tandem/train/train_config.h"
#include "tandem/train/trainer.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(TANDEM_TEST_TMPDIR) / name;
  fs::remove_all(dir);
  return dir.string();
}

using testing::fashion;

data::LabeledImages head(const data::LabeledImages& d, int64_t n) {
  return {d.images.slice(0, n), d.labels.slice(0, n)};
}

// A small model with dropout, so that determinism covers the mask stream too.
std::shared_ptr<nn::Module> small_dropout_model(uint64_t seed) {
  Generator g(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->emplace<nn::Flatten>()
      .emplace<nn::Linear>(784, 64, nn::LinearOptions{.activation = kernels::Activation::relu}, g)
      .emplace<nn::Dropout>(0.2f)
      .emplace<nn::Linear>(64, 10, nn::LinearOptions{}, g);
  return m;
}

// A model a program builds, under the name "small".
train::ModelFactory small_model(uint64_t seed) {
  return train::custom_model("small", [seed] { return small_dropout_model(seed); });
}

std::vector<double> step_losses(train::Trainer& trainer, const data::Dataset& train,
                                const std::optional<data::Dataset>& validation = {},
                                train::TrainResult* result = nullptr, int64_t stop_at = -1) {
  std::vector<double> losses;
  train::TrainCallbacks callbacks;
  callbacks.on_step = [&](const train::StepInfo& s) {
    losses.push_back(s.loss);
    if (s.global_step == stop_at) trainer.request_stop();
  };
  train::TrainResult r = trainer.fit(train, validation, callbacks);
  if (result) *result = r;
  return losses;
}

using testing::shuffled;

TEST(Checkpoint, RoundTripsTensorsAndMetadata) {
  const std::string dir = fresh_dir("ckpt");
  fs::create_directories(dir);
  train::Checkpoint c;
  c.metadata = {{"epoch", "3"}, {"note", "hello"}};
  c.tensors = {{"a", Tensor::from_floats(Shape{2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6})},
               {"b", Tensor::from_ints(Shape{1}, std::vector<int32_t>{-9})},
               {"empty", Tensor::empty(Shape{0})},
               {"half", Tensor::full(Shape{5}, 0.25f, DType::bf16)}};
  const std::string path = dir + "/x.tckpt";
  train::save_checkpoint(path, c);
  // Nothing but the checkpoint: no temporary left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  const train::Checkpoint back = train::load_checkpoint(path);
  EXPECT_EQ(back.metadata, c.metadata);
  ASSERT_EQ(back.tensors.size(), 4u);
  EXPECT_EQ(back.tensor("a").to_floats(), c.tensors[0].second.to_floats());
  EXPECT_EQ(back.tensor("b").to_ints(), std::vector<int32_t>{-9});
  EXPECT_EQ(back.tensor("half").dtype(), DType::bf16);
  EXPECT_THROW(back.tensor("zzz"), IoError);
}

TEST(Checkpoint, CorruptTruncatedAndForeignFilesAreRejected) {
  const std::string dir = fresh_dir("ckpt-bad");
  fs::create_directories(dir);
  const std::string path = dir + "/x.tckpt";
  train::Checkpoint c;
  c.tensors = {{"w", Tensor::full(Shape{100}, 1.0f)}};
  train::save_checkpoint(path, c);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto rewrite = [&](const std::string& content) {
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(content.data(), static_cast<std::streamsize>(content.size()));
  };
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x40;
  rewrite(flipped);
  try {
    train::load_checkpoint(path);
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  }
  rewrite(bytes.substr(0, bytes.size() - 100));
  EXPECT_THROW(train::load_checkpoint(path), IoError);
  rewrite("hello world, not a checkpoint");
  EXPECT_THROW(train::load_checkpoint(path), IoError);
  EXPECT_THROW(train::load_checkpoint(dir + "/missing.tckpt"), IoError);
}

TEST(Trainer, ShortCnnRunLearnsFashionMnist) {
  set_num_threads(2);
  train::Trainer trainer({.epochs = 1, .schedule = optim::ScheduleKind::constant},
                         train::builtin_model("cnn", precision::Policy::float32, 1));
  train::TrainResult result;
  const data::Dataset test = data::as_dataset(head(fashion().test, 2000));
  const std::vector<double> losses =
      step_losses(trainer, shuffled(head(fashion().train, 6400)), test, &result);
  ASSERT_EQ(losses.size(), 50u);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) {
    first += losses[i] / 5;
    last += losses[losses.size() - 1 - i] / 5;
  }
  EXPECT_LT(last, 0.6 * first) << "loss did not fall: " << first << " -> " << last;
  ASSERT_EQ(result.history.size(), 1u);
  // 50 steps at a constant rate: seeds spread over 73-79% (chance: 10%).
  EXPECT_GT(result.history[0].validation_metric("accuracy"), 0.70);
  EXPECT_GT(result.history[0].train_metric("accuracy"), 0.5);
  EXPECT_EQ(result.history[0].train_examples, 6400);
  EXPECT_GT(result.history[0].examples_per_second, 0.0);
  const train::EvalResult eval = trainer.evaluate(test);
  EXPECT_EQ(eval.examples, 2000);
  EXPECT_DOUBLE_EQ(eval.metric("accuracy"), result.history[0].validation_metric("accuracy"));
  EXPECT_DOUBLE_EQ(eval.loss, result.history[0].validation_loss);
}

TEST(Trainer, SameSeedSameThreadsGivesBitIdenticalLosses) {
  set_num_threads(2);
  auto run = [&](uint64_t seed) {
    train::Trainer trainer({.epochs = 1, .batch_size = 64, .engine = {.seed = seed}},
                           train::builtin_model("cnn", precision::Policy::float32, seed));
    return step_losses(trainer, shuffled(head(fashion().train, 1280), seed));
  };
  const std::vector<double> a = run(3), b = run(3), c = run(4);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  auto run_dropout = [&]() {
    train::Trainer trainer({.epochs = 2, .batch_size = 50, .engine = {.seed = 9}}, small_model(9));
    return step_losses(trainer, shuffled(head(fashion().train, 600), 9));
  };
  EXPECT_EQ(run_dropout(), run_dropout());
}

// on_batch sees each step's batch as the replicas got it, before on_step:
// over an epoch, every example once.
TEST(Trainer, OnBatchSeesEveryStepsRowsBeforeOnStep) {
  const int64_t examples = 300, batch = 50;
  train::Trainer trainer({.epochs = 2, .batch_size = batch, .engine = {.seed = 5}}, small_model(5));
  const data::LabeledImages rows = head(fashion().train, examples);
  std::vector<std::multiset<float>> seen(2);  // per epoch: each row's pixel sum
  std::vector<int64_t> batch_steps, step_steps;
  train::TrainCallbacks callbacks;
  callbacks.on_batch = [&](const train::TrainedBatch& b) {
    batch_steps.push_back(b.global_step);
    EXPECT_EQ(b.generation, 0);
    const Tensor images = b.batch.at("image").to(DType::f32);
    ASSERT_EQ(images.dim(0), batch);
    const int64_t width = images.numel() / batch;
    for (int64_t r = 0; r < batch; ++r) {
      float sum = 0;
      for (int64_t i = 0; i < width; ++i) sum += images.data<float>()[r * width + i];
      seen.at(static_cast<size_t>(b.epoch)).insert(sum);
    }
  };
  callbacks.on_step = [&](const train::StepInfo& s) {
    ASSERT_FALSE(batch_steps.empty());
    EXPECT_EQ(batch_steps.back(), s.global_step);
    step_steps.push_back(s.global_step);
  };
  trainer.fit(shuffled(rows, 5), {}, callbacks);
  EXPECT_EQ(batch_steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(step_steps, batch_steps);
  const Tensor all = rows.images.to(DType::f32);
  std::multiset<float> expected;
  for (int64_t r = 0; r < examples; ++r) {
    float sum = 0;
    for (int64_t i = 0; i < 784; ++i) sum += all.data<float>()[r * 784 + i];
    expected.insert(sum);
  }
  EXPECT_EQ(seen[0], expected);
  EXPECT_EQ(seen[1], expected);
}

// A stop asked for while fit() sets up (a signal then) stops it at its
// first step with a checkpoint; the request ends with that fit. (fit()
// cleared it as it began: the run said it was saving and trained on.)
TEST(Trainer, AStopBeforeTheFirstStepStopsThatFitOnly) {
  const data::Dataset d = data::as_dataset(head(fashion().train, 256));
  const std::string dir = fresh_dir("early-stop");
  train::Trainer trainer({.epochs = 2, .batch_size = 64, .output_dir = dir}, small_model(3));
  trainer.request_stop();
  std::vector<int64_t> steps;
  const train::TrainResult stopped = trainer.fit(
      d, {}, {.on_step = [&](const train::StepInfo& s) { steps.push_back(s.global_step); }});
  EXPECT_TRUE(stopped.interrupted);
  EXPECT_LE(steps.size(), 1u);
  EXPECT_TRUE(fs::exists(train::RunDirectory(dir).checkpoint()));
  // Spent with that fit: the next one trains to the end.
  train::Trainer in_memory({.epochs = 2, .batch_size = 64}, small_model(3));
  in_memory.request_stop();
  EXPECT_TRUE(in_memory.fit(d).interrupted);
  const train::TrainResult finished = in_memory.fit(d);
  EXPECT_FALSE(finished.interrupted);
  EXPECT_EQ(finished.history.size(), 2u);
}

TEST(Trainer, ResumeGivesTheSameLossesAsAnUninterruptedRun) {
  set_num_threads(2);
  // Two micro-batches a step, so that the gradient noise scale is measured
  // (its averages go on from the checkpoint).
  const train::TrainConfig base{
      .epochs = 3,
      .batch_size = 64,
      .engine = {.optimizer = {.kind = optim::OptimizerKind::adam, .learning_rate = 0.002},
                 .accumulation_steps = 2,
                 .seed = 11}};
  // 16 steps per epoch, the last one partial.
  const data::Dataset train_data = shuffled(head(fashion().train, 1000), 11);
  const data::Dataset test_data = data::as_dataset(head(fashion().test, 300));

  train::TrainConfig plain = base;
  train::Trainer uninterrupted(plain, small_model(11));
  train::TrainResult expected_result;
  const std::vector<double> expected =
      step_losses(uninterrupted, train_data, test_data, &expected_result);

  // Stopped mid-way through epoch 2, and after its last step (the epoch
  // then closes in the resumed run: it reported the next step's rate).
  for (const int64_t stop_at : {21, 32}) {
    SCOPED_TRACE("stopped at step " + std::to_string(stop_at));
    train::TrainConfig with_output = base;
    with_output.output_dir = fresh_dir("resume");
    std::vector<double> losses;
    {
      train::Trainer first(with_output, small_model(11));
      train::TrainResult r;
      losses = step_losses(first, train_data, test_data, &r, stop_at);
      EXPECT_TRUE(r.interrupted);
      EXPECT_EQ(r.history.size(), 1u);
    }
    {
      // A fresh process's view: new model with other weights, restored from disk.
      train::TrainConfig resume = with_output;
      resume.resume = true;
      train::Trainer second(resume,
                            train::custom_model("small", [] { return small_dropout_model(999); }));
      train::TrainResult r;
      const std::vector<double> rest = step_losses(second, train_data, test_data, &r);
      losses.insert(losses.end(), rest.begin(), rest.end());
      EXPECT_EQ(r.resumed_from_step, stop_at);
      ASSERT_EQ(r.history.size(), 3u);
      for (size_t e = 0; e < 3; ++e) {
        EXPECT_EQ(r.history[e].train_loss, expected_result.history[e].train_loss)
            << "epoch " << e + 1;
        EXPECT_EQ(r.history[e].learning_rate, expected_result.history[e].learning_rate)
            << "epoch " << e + 1;
        ASSERT_TRUE(std::isfinite(expected_result.history[e].noise_scale));
        EXPECT_EQ(r.history[e].noise_scale, expected_result.history[e].noise_scale)
            << "epoch " << e + 1;
        EXPECT_EQ(r.history[e].train_metric("accuracy"),
                  expected_result.history[e].train_metric("accuracy"));
        EXPECT_EQ(r.history[e].validation_metric("accuracy"),
                  expected_result.history[e].validation_metric("accuracy"));
      }
      const auto pa = uninterrupted.model().parameters(), pb = second.model().parameters();
      for (size_t i = 0; i < pa.size(); ++i) {
        EXPECT_EQ(pa[i].value().to_floats(), pb[i].value().to_floats()) << "parameter " << i;
      }
    }
    EXPECT_EQ(losses, expected);
  }
}

TEST(Trainer, ARunStoppedAfterAnEpochAndResumedIsTheUninterruptedRun) {
  set_num_threads(2);
  // The cosine schedule spans all 3 epochs in both runs (how a search's
  // rungs train a trial).
  const train::TrainConfig base{.epochs = 3, .batch_size = 64, .engine = {.seed = 5}};
  const data::Dataset train_data = shuffled(head(fashion().train, 640), 5);
  const data::Dataset test_data = data::as_dataset(head(fashion().test, 200));
  train::Trainer uninterrupted(base, small_model(5));
  train::TrainResult expected;
  const std::vector<double> all = step_losses(uninterrupted, train_data, test_data, &expected);

  train::TrainConfig rung = base;
  rung.output_dir = fresh_dir("stop-after");
  rung.stop_after_epochs = 1;
  std::vector<double> losses;
  {
    train::Trainer first(rung, small_model(5));
    train::TrainResult r;
    losses = step_losses(first, train_data, test_data, &r);
    EXPECT_TRUE(r.paused);
    EXPECT_FALSE(r.interrupted);
    EXPECT_EQ(r.history.size(), 1u);
  }
  rung.resume = true;
  {
    // Resumed at the epoch it stops after: nothing to train.
    train::Trainer again(rung, small_model(6));
    train::TrainResult r;
    EXPECT_TRUE(step_losses(again, train_data, test_data, &r).empty());
    EXPECT_TRUE(r.paused);
    EXPECT_EQ(r.history.size(), 1u);
  }
  rung.stop_after_epochs = 0;
  // The earlier part's summary is gone while the run goes on: killed, the
  // run left it standing for the whole (tandem report read its figures).
  const std::string summary = train::RunDirectory(rung.output_dir).summary();
  std::ofstream(summary) << "{}";
  train::Trainer rest(rung, small_model(7));
  train::TrainResult r;
  const std::vector<double> more = step_losses(rest, train_data, test_data, &r);
  EXPECT_FALSE(std::filesystem::exists(summary));
  losses.insert(losses.end(), more.begin(), more.end());
  EXPECT_FALSE(r.paused);
  ASSERT_EQ(r.history.size(), 3u);
  EXPECT_EQ(losses, all);
  EXPECT_EQ(r.history[2].validation_loss, expected.history[2].validation_loss);
}

TEST(Trainer, RepeatedDataRunsEveryEpochAndResumesAcrossAPassBoundary) {
  set_num_threads(2);
  // 10 steps a pass, 4 a epoch, 6 epochs: 2.4 passes, each its own shuffle.
  const train::TrainConfig base{
      .epochs = 6, .batch_size = 64, .steps_per_epoch = 4, .repeat = true, .engine = {.seed = 5}};
  const data::Dataset train_data = shuffled(head(fashion().train, 640), 5);
  const data::Dataset test_data = data::as_dataset(head(fashion().test, 200));
  train::Trainer uninterrupted(base, small_model(5));
  train::TrainResult expected;
  const std::vector<double> all = step_losses(uninterrupted, train_data, test_data, &expected);
  EXPECT_EQ(all.size(), 24u);
  EXPECT_FALSE(expected.input_exhausted);
  ASSERT_EQ(expected.history.size(), 6u);
  // Without repeat the run ends with its one pass; resumed, it has nothing
  // more to train (each resume added an empty epoch and moved on).
  {
    train::TrainConfig once = base;
    once.repeat = false;
    once.output_dir = fresh_dir("exhausted");
    train::Trainer t(once, small_model(5));
    train::TrainResult r;
    EXPECT_EQ(step_losses(t, train_data, test_data, &r).size(), 10u);
    EXPECT_TRUE(r.input_exhausted);
    const size_t epochs = r.history.size();
    once.resume = true;
    for (int again = 0; again < 2; ++again) {
      train::Trainer resumed(once, small_model(5));
      train::TrainResult more;
      EXPECT_TRUE(step_losses(resumed, train_data, test_data, &more).empty());
      EXPECT_TRUE(more.input_exhausted);
      EXPECT_EQ(more.history.size(), epochs) << "resume " << again + 1;
    }
  }
  // Stopped after 12 steps (past the first pass's end) and resumed.
  train::TrainConfig rung = base;
  rung.output_dir = fresh_dir("repeat");
  rung.stop_after_epochs = 3;
  std::vector<double> losses;
  {
    train::Trainer first(rung, small_model(5));
    losses = step_losses(first, train_data, test_data);
  }
  rung.stop_after_epochs = 0;
  rung.resume = true;
  // A position no run writes (a damaged or edited checkpoint with a valid
  // CRC) is refused at once: a global step of 10^12 replayed batches for
  // hours.
  {
    const std::string path = train::RunDirectory(rung.output_dir).checkpoint();
    const train::Checkpoint good = train::load_checkpoint(path);
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, std::string>>{{"global_step", "1000000000000"},
                                                          {"step", "9"},
                                                          {"epoch", "1"},
                                                          {"examples", "-4"},
                                                          {"loss_sum", "inf"}}) {
      train::Checkpoint bad = good;
      bad.metadata[key] = value;
      train::save_checkpoint(path, bad);
      train::Trainer refused(rung, small_model(7));
      EXPECT_THROW(refused.prepare_resume(), IoError) << key << " = " << value;
    }
    train::save_checkpoint(path, good);
  }
  train::Trainer rest(rung, small_model(7));
  train::TrainResult r;
  const std::vector<double> more = step_losses(rest, train_data, test_data, &r);
  losses.insert(losses.end(), more.begin(), more.end());
  EXPECT_EQ(losses, all);
  ASSERT_EQ(r.history.size(), 6u);
  EXPECT_EQ(r.history[5].validation_loss, expected.history[5].validation_loss);
}

// Logits that name the label (x is its one-hot), scaled by a parameter;
// NaN on the forward pass numbered `poisoned`.
class PoisonedOnce : public nn::Module {
 public:
  explicit PoisonedOnce(int poisoned) : poisoned_(poisoned) {
    w_ = register_parameter("w", Tensor::full(Shape{1}, 1.0f));
  }
  Variable forward(const Variable& x) override {
    const float factor = is_training() && calls_++ == poisoned_ ? NAN : 10.0f;
    return scale(mul(x, w_), factor);
  }
  std::string describe() const override { return "PoisonedOnce"; }

 private:
  Variable w_;
  int poisoned_, calls_ = 0;
};

TEST(Trainer, TrainingMetricsLeaveOutTheRowsOfNonFiniteSteps) {
  // As the loss and the example count do: accuracy counted them (here
  // 1 of 8 steps' rows as wrong: 7/8 where every finite step is right).
  Tensor x = Tensor::zeros(Shape{64, 3});
  std::vector<int32_t> labels(64);
  for (int i = 0; i < 64; ++i) {
    labels[static_cast<size_t>(i)] = i % 3;
    x.data<float>()[i * 3 + i % 3] = 1.0f;
  }
  const data::Dataset d = data::as_dataset({x, Tensor::from_ints(Shape{64}, labels)});
  train::TrainConfig c{.epochs = 1, .batch_size = 8, .engine = {.seed = 1}};
  c.engine.loss_scale = precision::LossScalerOptions{.dynamic = false, .initial_scale = 1.0};
  c.engine.optimizer.learning_rate = 1e-6;
  c.engine.optimizer.global_clip_norm = 1000.0;
  train::Trainer t(
      c, train::custom_model("poisoned", [] { return std::make_shared<PoisonedOnce>(2); }));
  std::vector<train::StepInfo> steps;
  const train::TrainResult r =
      t.fit(d, std::nullopt, {.on_step = [&](const train::StepInfo& s) { steps.push_back(s); }});
  ASSERT_EQ(r.history.size(), 1u);
  EXPECT_EQ(r.history[0].nonfinite_steps, 1);
  EXPECT_EQ(r.history[0].train_examples, 56);
  EXPECT_EQ(r.history[0].train_metric("accuracy"), 1.0);
  // The skipped step's gradient norm is inf (it showed the step before's).
  ASSERT_EQ(steps.size(), 8u);
  for (const train::StepInfo& s : steps) {
    EXPECT_EQ(s.skipped, std::isinf(s.gradient_norm)) << "step " << s.step;
    if (!s.skipped) {
      EXPECT_TRUE(std::isfinite(s.gradient_norm)) << "step " << s.step;
    }
  }
}

TEST(Trainer, BadConfigurationsAreClearErrors) {
  const data::Dataset d = data::as_dataset(head(fashion().train, 100));
  auto make = [&](train::TrainConfig c) { return train::Trainer(c, train::builtin_model("mlp")); };
  EXPECT_THROW(make({.batch_size = -5}), InvalidArgument);
  EXPECT_THROW(make({.epochs = 0}), InvalidArgument);
  EXPECT_THROW(make({.epochs = 3, .stop_after_epochs = 4}), InvalidArgument);
  EXPECT_THROW(make({.epochs = 3, .stop_after_epochs = -1}), InvalidArgument);
  // A pause without an output directory saved nothing to resume from.
  EXPECT_THROW(make({.epochs = 3, .stop_after_epochs = 1}), InvalidArgument);
  EXPECT_THROW(make({.steps_per_epoch = -1}), InvalidArgument);
  EXPECT_THROW(make({.repeat = true}), InvalidArgument);  // an epoch that never ends
  EXPECT_THROW(make({.resume = true}), InvalidArgument);
  EXPECT_THROW(make({.input_feature = ""}), InvalidArgument);
  EXPECT_THROW(train::builtin_model("resnet152"), InvalidArgument);
  // A class metric beside a regression loss failed at the first batch.
  train::TrainConfig regression;
  regression.loss = train::make_loss("mean_squared_error");
  regression.metrics = {train::make_metric("accuracy")};
  try {
    make(regression);
    ADD_FAILURE() << "accuracy beside mean_squared_error was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("metric 'accuracy' scores classes"), std::string::npos)
        << e.what();
  }
  regression.metrics = {train::make_metric("rmse")};
  EXPECT_NO_THROW(make(regression));

  const std::string dir = fresh_dir("conflict");
  train::Trainer first({.epochs = 1, .batch_size = 50, .output_dir = dir},
                       train::builtin_model("mlp"));
  first.fit(d, d);
  train::Trainer again({.epochs = 1, .batch_size = 50, .output_dir = dir},
                       train::builtin_model("mlp"));
  EXPECT_THROW(again.fit(d), InvalidArgument);  // would overwrite the checkpoint
  const auto mismatch = [&](train::TrainConfig c, train::ModelFactory model,
                            const std::string& expected) {
    c.output_dir = dir;
    c.resume = true;
    train::Trainer t(c, std::move(model));
    try {
      t.fit(d);
      ADD_FAILURE() << "resumed; expected: " << expected;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  mismatch({.epochs = 2, .batch_size = 25}, train::builtin_model("mlp"), "batch_size");
  mismatch({.epochs = 2, .batch_size = 50}, train::builtin_model("cnn"), "model 'mlp'");
  mismatch({.epochs = 2, .batch_size = 50},
           train::builtin_model("mlp", precision::Policy::float32, 5), "seed 5");
  mismatch({.epochs = 2,
            .batch_size = 50,
            .loss = train::make_loss("softmax_cross_entropy", {.label_smoothing = 0.1})},
           train::builtin_model("mlp"), "loss");
  mismatch({.epochs = 1, .batch_size = 50}, train::builtin_model("mlp"),
           "the run has trained 1 epoch(s) and epochs (--epochs) is 1, which leaves nothing to "
           "train");
}

// An elastic job's new membership splits the same global batch anew: the
// replicas' share and, under accumulation, the micro-batch (which kept the
// first membership's size, or split into unequal micro-batches, before).
TEST(Trainer, ANewReplicaCountSplitsTheBatchAnew) {
  train::TrainConfig c{.batch_size = 96, .engine = {.accumulation_steps = 4}};
  train::resolve_batch_sizes(c, 3);
  EXPECT_EQ(c.micro_batch_size, 8);
  train::split_global_batch(c, 2);
  EXPECT_EQ(c.micro_batch_size, 12);
  train::split_global_batch(c, 8);
  EXPECT_EQ(c.micro_batch_size, 3);
  const auto error_of = [&](int replicas) {
    try {
      train::split_global_batch(c, replicas);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(5).find("does not divide among 5 replicas"), std::string::npos);
  EXPECT_NE(error_of(16).find("6 examples, which 4 accumulation steps do not split"),
            std::string::npos)
      << error_of(16);
  EXPECT_NE(error_of(97).find("fewer examples than the 97 replicas"), std::string::npos);
}

// Schedule and optimizer settings that cannot train are refused when the
// Trainer is built, naming the field (and its tandem train flag).
TEST(Trainer, ScheduleAndOptimizerSettingsOutOfRangeAreRefused) {
  const auto error_of = [](train::TrainConfig c) {
    try {
      train::Trainer(c, train::builtin_model("mlp"));
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of({.lr_gamma = 0.0}),
            "lr_gamma (--lr-gamma) must be in (0, 1] (the step schedule's decay factor), got 0");
  EXPECT_NE(error_of({.lr_gamma = 1.5}).find("lr_gamma"), std::string::npos);
  EXPECT_NE(error_of({.lr_step_epochs = -1.0}).find("lr_step_epochs"), std::string::npos);
  EXPECT_EQ(error_of({.min_lr = 0.1}),
            "min_lr (--min-lr) must be in [0, 0.05] (at most the learning rate the cosine "
            "schedule decays from), got 0.1");
  EXPECT_NE(error_of({.min_lr = -1e-4}).find("min_lr"), std::string::npos);
  EXPECT_EQ(
      error_of({.epochs = 2, .warmup_epochs = 2.5}),
      "warmup_epochs (--warmup-epochs) must be in [0, 2] (at most the run's epochs), got 2.5");
  EXPECT_EQ(error_of({.engine = {.optimizer = {.momentum = 1.5}}}),
            "sgd momentum must be in [0, 1), got 1.5");
  EXPECT_EQ(error_of({.engine = {.optimizer = {.kind = optim::OptimizerKind::adam,
                                               .learning_rate = 0.0}}}),
            "adam learning rate must be positive and finite, got 0");
  EXPECT_EQ(error_of({.epochs = 2, .min_lr = 0.05, .warmup_epochs = 2.0}), "no error");
}

// prepare_resume() reads and checks the checkpoint before fit() (which
// then continues from it): a run that is not there is refused without
// creating anything, and the position tells the epochs the run started with.
TEST(Trainer, PrepareResumeChecksTheRunBeforeFit) {
  const data::Dataset d = data::as_dataset(head(fashion().train, 100));
  const std::string missing = fresh_dir("resume_missing");
  train::Trainer none({.epochs = 1, .batch_size = 50, .output_dir = missing, .resume = true},
                      train::builtin_model("mlp"));
  try {
    none.prepare_resume();
    ADD_FAILURE() << "resumed a run that does not exist";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              "no run to resume at '" + missing + "': the directory does not exist");
  }
  EXPECT_THROW(none.fit(d), InvalidArgument);
  EXPECT_FALSE(fs::exists(missing));
  const std::string empty = fresh_dir("resume_empty");
  fs::create_directories(empty);
  train::Trainer nothing({.epochs = 1, .batch_size = 50, .output_dir = empty, .resume = true},
                         train::builtin_model("mlp"));
  try {
    nothing.prepare_resume();
    ADD_FAILURE() << "resumed a directory without a checkpoint";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              "no run to resume at '" + empty + "': it has no checkpoint.tckpt");
  }
  train::Trainer fresh({.epochs = 1, .batch_size = 50}, train::builtin_model("mlp"));
  EXPECT_THROW(fresh.prepare_resume(), InvalidArgument);  // not resuming

  const std::string dir = fresh_dir("resume_point");
  train::Trainer first({.epochs = 1, .batch_size = 50, .output_dir = dir},
                       train::builtin_model("mlp"));
  first.fit(d);
  train::Trainer second({.epochs = 3, .batch_size = 50, .output_dir = dir, .resume = true},
                        train::builtin_model("mlp"));
  const train::ResumePoint& point = second.prepare_resume();
  EXPECT_EQ(point.epoch, 1);
  EXPECT_EQ(point.step, 0);
  EXPECT_EQ(point.global_step, 2);
  EXPECT_EQ(point.epochs, 1);  // the cosine schedule is stretched from 1 epoch to 3
  const train::TrainResult r = second.fit(d);
  EXPECT_EQ(r.resumed_from_step, 2);
  EXPECT_EQ(r.history.size(), 3u);
  train::Trainer third({.epochs = 4, .batch_size = 50, .output_dir = dir, .resume = true},
                       train::builtin_model("mlp"));
  EXPECT_EQ(third.prepare_resume().epochs, 3);  // the resumed run's checkpoints record 3
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// How batches are assembled: on the data layer's threads, ahead in time
// (prefetch) and several at once (parallel calls).
struct InputSetting {
  int prefetch_batches = 0;
  int parallel_calls = 1;
};

class TrainerInput : public ::testing::TestWithParam<InputSetting> {};

// Moving batch assembly to other threads, ahead in time or several at once,
// leaves the batches, and so the losses, unchanged, across an interruption
// too (which also destroys a pipeline with batches still being built).
TEST_P(TrainerInput, GivesTheSameLossesAsTheMainThread) {
  set_num_threads(1);
  train::TrainConfig base{
      .epochs = 2,
      .batch_size = 64,
      .engine = {.optimizer = {.kind = optim::OptimizerKind::adam, .learning_rate = 0.002},
                 .seed = 4}};
  base.batch_transform = [](data::Element batch) {
    const Tensor images = batch.at("image");
    // A random augmentation: mirror each image left-right with probability
    // 1/2, drawing from the thread's generator (seeded per step by fit()).
    Tensor flipped = images.clone();
    const int64_t n = images.dim(0), h = images.dim(1), w = images.dim(2);
    const float* src = images.data<float>();
    float* dst = flipped.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      if (thread_generator().next_below(2) == 0) continue;
      for (int64_t r = i * h; r < (i + 1) * h; ++r)
        for (int64_t x = 0; x < w; ++x) dst[r * w + x] = src[r * w + (w - 1 - x)];
    }
    batch.set("image", flipped);
    return batch;
  };
  const data::Dataset train_data = shuffled(head(fashion().train, 640), 4);  // 10 steps per epoch
  const data::Dataset test_data = data::as_dataset(head(fashion().test, 100));
  train::Trainer plain(base, small_model(4));
  const std::vector<double> expected = step_losses(plain, train_data, test_data);

  train::TrainConfig piped = base;
  piped.prefetch_batches = GetParam().prefetch_batches;
  piped.input_parallel_calls = GetParam().parallel_calls;
  // Each instance is its own CTest test, maybe running beside another.
  piped.output_dir = fresh_dir(std::string("input_resume_") +
                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::vector<double> losses;
  {
    train::Trainer first(piped, small_model(4));
    train::TrainResult r;
    losses = step_losses(first, train_data, test_data, &r, /*stop_at=*/13);
    EXPECT_TRUE(r.interrupted);
    ASSERT_EQ(r.history.size(), 1u);
    // The pipeline's counters: the source, the shuffle, the batch, the
    // transforming map, and a prefetch buffer when asked for; the map built
    // at least the 10 batches trained on (more may have been ready ahead).
    const std::vector<data::StageStats>& stages = r.history[0].input_stages;
    ASSERT_EQ(stages.size(), piped.prefetch_batches != 0 ? 5u : 4u);
    EXPECT_EQ(stages[0].stage, "tensors");
    EXPECT_EQ(stages[2].stage, "batch(64)");
    EXPECT_EQ(stages[3].stage.substr(0, 3), "map");
    EXPECT_GE(stages[3].elements, 10);
    EXPECT_GT(stages[3].busy_seconds, 0.0);
  }
  piped.resume = true;
  train::Trainer second(piped, train::custom_model("small", [] { return small_dropout_model(5); }));
  const std::vector<double> rest = step_losses(second, train_data, test_data);
  losses.insert(losses.end(), rest.begin(), rest.end());
  EXPECT_EQ(losses, expected);
}

INSTANTIATE_TEST_SUITE_P(Settings, TrainerInput,
                         ::testing::Values(InputSetting{3, 1}, InputSetting{0, 3},
                                           InputSetting{2, data::kAutotune},
                                           InputSetting{data::kAutotune, 2}),
                         [](const ::testing::TestParamInfo<InputSetting>& setting) {
                           const auto name = [](int v) {
                             return v == data::kAutotune ? std::string("auto") : std::to_string(v);
                           };
                           return "prefetch_" + name(setting.param.prefetch_batches) +
                                  "_parallel_" + name(setting.param.parallel_calls);
                         });

TEST(Trainer, MainThreadInputCountsTheSourceAndTheBatches) {
  train::TrainConfig c{.epochs = 1, .batch_size = 64, .engine = {.seed = 1}};
  train::Trainer t(c, small_model(1));
  const auto stages =
      t.fit(data::as_dataset(head(fashion().train, 128))).history.at(0).input_stages;
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].elements, 128);
  EXPECT_EQ(stages[1].stage, "batch(64)");
  EXPECT_EQ(stages[1].elements, 2);
}

TEST_P(TrainerInput, BatchBuildingErrorsReachFit) {
  train::TrainConfig c{.epochs = 1, .batch_size = 32, .engine = {.seed = 1}};
  c.prefetch_batches = GetParam().prefetch_batches;
  c.input_parallel_calls = GetParam().parallel_calls;
  std::atomic<int> built = 0;
  c.batch_transform = [&](data::Element batch) {
    if (++built == 3) batch.set("image", batch.at("image").slice(0, 1));  // drops rows: an error
    return batch;
  };
  train::Trainer t(c, small_model(1));
  try {
    t.fit(data::as_dataset(head(fashion().train, 320)));
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("batch_transform changed the batch"), std::string::npos)
        << e.what();
  }
}

TEST(Trainer, RejectsBadInputSettings) {
  train::TrainConfig c{.epochs = 1, .batch_size = 32, .engine = {.seed = 1}};
  const auto rejects = [&](const std::string& expected) {
    try {
      train::Trainer(c, small_model(1));
      ADD_FAILURE() << "accepted; expected: " << expected;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  c.prefetch_batches = -2;
  rejects("prefetch depth must be 0 or more batches (or autotune), got -2");
  c.prefetch_batches = 0;
  c.input_parallel_calls = 0;
  rejects("input parallel calls must be at least 1 (or autotune), got 0");
}

}  // namespace
}  // namespace tandem
