#pragma once
// Trainer: fit() and evaluate() for classification on in-memory labelled
// images, on one device. Each epoch visits the training set in an order drawn
// from (seed, epoch); each step's dropout masks come from (seed, step); the
// learning rate is a function of the step. Together with checkpoints that
// record the position inside an epoch and the running sums, this makes a
// resumed run produce the same losses as an uninterrupted one.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/data/fashion_mnist.h"
#include "tandem/nn/module.h"
#include "tandem/optim/lr_schedule.h"
#include "tandem/optim/optimizer.h"

namespace tandem::train {

struct TrainConfig {
  std::string model = "cnn";  // recorded in checkpoints and summaries
  int64_t epochs = 5;
  int64_t batch_size = 128;
  int64_t eval_batch_size = 1000;
  bool drop_remainder = false;  // false: the last partial batch is trained too
  optim::OptimizerConfig optimizer;
  // Cosine decay from the learning rate to min_lr over the run: the recipe
  // fixes the rate, not its schedule, and decay converges further (see
  // docs/performance.md for both).
  std::string schedule = "cosine";  // constant, step, cosine
  double lr_step_epochs = 1.0;        // step schedule period, in epochs
  double lr_gamma = 0.1;              // step schedule factor
  double min_lr = 0.0;                // cosine floor
  double warmup_epochs = 0.0;
  uint64_t seed = 0;
  DType compute_dtype = DType::f32;
  // Where checkpoints go (empty: no checkpoints). "checkpoint.tckpt" inside it.
  std::string output_dir;
  bool resume = false;
};

struct EpochResult {
  int64_t epoch = 0;  // 1-based
  double train_loss = 0.0;
  double train_accuracy = 0.0;
  double test_loss = 0.0;
  double test_accuracy = 0.0;
  double examples_per_second = 0.0;  // training examples over training time
  double train_seconds = 0.0;
  double learning_rate = 0.0;  // at the epoch's last step
};

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;
  int64_t examples = 0;
};

struct StepInfo {
  int64_t epoch = 0;  // 1-based
  int64_t step = 0;   // within the epoch, 1-based
  int64_t steps_per_epoch = 0;
  int64_t global_step = 0;  // 1-based, over the whole run
  double loss = 0.0;
  double learning_rate = 0.0;
  int64_t batch_examples = 0;
};

struct TrainResult {
  std::vector<EpochResult> history;
  bool interrupted = false;  // stopped by request_stop(); a checkpoint was saved
  double wall_seconds = 0.0;
  int64_t resumed_from_step = 0;  // global step the run resumed at (0: fresh)
};

struct TrainCallbacks {
  std::function<void(const StepInfo&)> on_step;
  std::function<void(const EpochResult&)> on_epoch;
};

class Trainer {
 public:
  // Throws InvalidArgument for a configuration that cannot work (non-positive
  // epochs or batch size, a batch larger than the training set, ...).
  Trainer(TrainConfig config, std::shared_ptr<nn::Module> model, data::LabeledImages train_data,
          data::LabeledImages test_data);
  ~Trainer();

  // Trains config.epochs epochs (continuing from the checkpoint when resuming).
  TrainResult fit(const TrainCallbacks& callbacks = {});
  // Loss and accuracy over a dataset, in evaluation mode without gradients.
  EvalResult evaluate(const data::LabeledImages& data);

  // Asks fit() to stop after the current step, saving a checkpoint. Safe to
  // call from a signal handler or another thread.
  void request_stop() { stop_requested_.store(true); }

  nn::Module& model() { return *model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  std::string checkpoint_path() const;
  int64_t steps_per_epoch() const;

 private:
  struct Progress;
  void save(const Progress& progress, const std::vector<EpochResult>& history);
  void restore(Progress& progress, std::vector<EpochResult>& history);

  TrainConfig config_;
  std::shared_ptr<nn::Module> model_;
  data::LabeledImages train_, test_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  std::atomic<bool> stop_requested_{false};
};

}  // namespace tandem::train
