#include "tandem/train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/data/batching.h"
#include "tandem/kernels/loss.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/detail/epoch_json.h"

namespace tandem::train {

// Where the run stands: the next step to run and the sums of the epoch so far.
struct Trainer::Progress {
  int64_t epoch = 0;      // 0-based epoch in progress
  int64_t step = 0;       // next step inside it
  double loss_sum = 0.0;  // sum over examples of the per-example loss
  int64_t correct = 0;
  int64_t seen = 0;
  double train_seconds = 0.0;
};

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kCheckpointFile = "checkpoint.tckpt";
constexpr const char* kFormat = "tandem-trainer-1";

void check_data(const data::LabeledImages& d, const char* what) {
  if (!d.images.defined() || !d.labels.defined() || d.images.rank() < 2 ||
      d.labels.dtype() != DType::i32 || d.labels.rank() != 1 ||
      d.images.dim(0) != d.labels.dim(0)) {
    TANDEM_THROW(InvalidArgument, what, " data must be images (N, ...) with i32 labels (N,), got ",
                 d.images.to_string(), " and ", d.labels.to_string());
  }
}

std::string number(double value) {
  return fmt::format("{}", value);
}

int64_t to_steps(double epochs, int64_t steps_per_epoch) {
  return static_cast<int64_t>(std::llround(epochs * static_cast<double>(steps_per_epoch)));
}

}  // namespace

Trainer::Trainer(TrainConfig config, std::shared_ptr<nn::Module> model,
                 data::LabeledImages train_data, data::LabeledImages test_data)
    : config_(std::move(config)),
      model_(std::move(model)),
      train_(std::move(train_data)),
      test_(std::move(test_data)) {
  if (!model_) TANDEM_THROW(InvalidArgument, "Trainer needs a model");
  check_data(train_, "training");
  if (test_.size() > 0) check_data(test_, "test");
  if (config_.epochs < 1)
    TANDEM_THROW(InvalidArgument, "epochs must be at least 1, got ", config_.epochs);
  if (config_.batch_size < 1) {
    TANDEM_THROW(InvalidArgument, "batch size must be at least 1, got ", config_.batch_size);
  }
  if (config_.batch_size > train_.size()) {
    TANDEM_THROW(InvalidArgument, "batch size ", config_.batch_size,
                 " is larger than the training set (", train_.size(), " examples)");
  }
  if (config_.eval_batch_size < 1) {
    TANDEM_THROW(InvalidArgument, "evaluation batch size must be at least 1, got ",
                 config_.eval_batch_size);
  }
  if (config_.warmup_epochs < 0.0) {
    TANDEM_THROW(InvalidArgument, "warm-up epochs must be >= 0, got ", config_.warmup_epochs);
  }
  optimizer_ = optim::make_optimizer(config_.optimizer, model_->parameters());
  const int64_t per_epoch = steps_per_epoch();
  schedule_ = optim::make_schedule(
      {.name = config_.schedule,
       .base_lr = config_.optimizer.learning_rate,
       .step_size = std::max<int64_t>(1, to_steps(config_.lr_step_epochs, per_epoch)),
       .gamma = config_.lr_gamma,
       .total_steps = per_epoch * config_.epochs,
       .min_lr = config_.min_lr,
       .warmup_steps = to_steps(config_.warmup_epochs, per_epoch)});
  if (config_.resume && config_.output_dir.empty()) {
    TANDEM_THROW(InvalidArgument, "resume needs the output directory that holds the checkpoint");
  }
}

Trainer::~Trainer() = default;

int64_t Trainer::steps_per_epoch() const {
  const int64_t n = train_.size();
  return config_.drop_remainder ? n / config_.batch_size
                                : (n + config_.batch_size - 1) / config_.batch_size;
}

std::string Trainer::checkpoint_path() const {
  return config_.output_dir.empty()
             ? std::string()
             : (std::filesystem::path(config_.output_dir) / kCheckpointFile).string();
}

EvalResult Trainer::evaluate(const data::LabeledImages& data) {
  EvalResult result;
  if (data.size() == 0) return result;
  check_data(data, "evaluation");
  NoGradGuard no_grad;
  const bool was_training = model_->is_training();
  model_->eval();
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (int64_t begin = 0; begin < data.size(); begin += config_.eval_batch_size) {
    const int64_t end = std::min(data.size(), begin + config_.eval_batch_size);
    const Tensor x = data.images.slice(begin, end);
    const Tensor y = data.labels.slice(begin, end);
    const Variable logits = model_->forward(Variable(x));
    loss_sum +=
        static_cast<double>(softmax_cross_entropy(logits, y).value().item()) * (end - begin);
    correct += kernels::count_correct(logits.value(), y);
  }
  model_->train(was_training);
  result.examples = data.size();
  result.loss = loss_sum / static_cast<double>(data.size());
  result.accuracy = static_cast<double>(correct) / static_cast<double>(data.size());
  return result;
}

TrainResult Trainer::fit(const TrainCallbacks& callbacks) {
  const auto run_start = Clock::now();
  TrainResult result;
  Progress progress;
  if (config_.resume) {
    restore(progress, result.history);
    result.resumed_from_step = progress.epoch * steps_per_epoch() + progress.step;
  } else if (!config_.output_dir.empty() && std::filesystem::exists(checkpoint_path())) {
    TANDEM_THROW(InvalidArgument, "'", checkpoint_path(),
                 "' already exists: resume it or choose "
                 "another output directory rather than overwrite it");
  }
  if (!config_.output_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(config_.output_dir, error);
    if (error) {
      TANDEM_THROW(IoError, "cannot create output directory '", config_.output_dir,
                   "': ", error.message());
    }
  }
  stop_requested_.store(false);
  model_->train();
  const int64_t n = train_.size();
  const int64_t per_epoch = steps_per_epoch();
  for (; progress.epoch < config_.epochs; ++progress.epoch) {
    const std::vector<int64_t> order = data::epoch_permutation(n, config_.seed, progress.epoch);
    double lr = optimizer_->learning_rate();
    for (; progress.step < per_epoch; ++progress.step) {
      if (stop_requested_.load()) {
        save(progress, result.history);
        result.interrupted = true;
        result.wall_seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
        return result;
      }
      const auto step_start = Clock::now();
      const int64_t begin = progress.step * config_.batch_size;
      const int64_t end = std::min(n, begin + config_.batch_size);
      const std::span<const int64_t> rows(order.data() + begin, static_cast<size_t>(end - begin));
      const Tensor x = data::gather_rows(train_.images, rows);
      const Tensor y = data::gather_rows(train_.labels, rows);
      const int64_t global_step = progress.epoch * per_epoch + progress.step;
      lr = schedule_->lr(global_step);
      optimizer_->set_learning_rate(lr);
      thread_generator().set_state(
          mix_seed(config_.seed ^ 0xD50Dull, static_cast<uint64_t>(global_step)), 0);
      optimizer_->zero_grad();
      const Variable logits = model_->forward(Variable(x));
      const Variable loss = softmax_cross_entropy(logits, y);
      loss.backward();
      optimizer_->step();
      const double loss_value = loss.value().item();
      if (!std::isfinite(loss_value)) {
        TANDEM_THROW(Error, "training diverged: loss is ", loss_value, " at epoch ",
                     progress.epoch + 1, " step ", progress.step + 1, " (lower the learning rate)");
      }
      progress.loss_sum += loss_value * static_cast<double>(end - begin);
      progress.correct += kernels::count_correct(logits.value(), y);
      progress.seen += end - begin;
      progress.train_seconds += std::chrono::duration<double>(Clock::now() - step_start).count();
      if (callbacks.on_step) {
        callbacks.on_step({.epoch = progress.epoch + 1,
                           .step = progress.step + 1,
                           .steps_per_epoch = per_epoch,
                           .global_step = global_step + 1,
                           .loss = loss_value,
                           .learning_rate = lr,
                           .batch_examples = end - begin});
      }
    }
    EpochResult epoch;
    epoch.epoch = progress.epoch + 1;
    epoch.train_loss = progress.loss_sum / static_cast<double>(std::max<int64_t>(progress.seen, 1));
    epoch.train_accuracy = static_cast<double>(progress.correct) /
                           static_cast<double>(std::max<int64_t>(progress.seen, 1));
    epoch.train_seconds = progress.train_seconds;
    epoch.examples_per_second = progress.seen / std::max(progress.train_seconds, 1e-9);
    epoch.learning_rate = lr;
    const EvalResult test = evaluate(test_);
    epoch.test_loss = test.loss;
    epoch.test_accuracy = test.accuracy;
    result.history.push_back(epoch);
    progress = Progress{.epoch = progress.epoch, .step = 0};
    if (!config_.output_dir.empty()) {
      Progress next = progress;
      ++next.epoch;
      save(next, result.history);
    }
    if (callbacks.on_epoch) callbacks.on_epoch(epoch);
  }
  result.wall_seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
  return result;
}

void Trainer::save(const Progress& progress, const std::vector<EpochResult>& history) {
  if (config_.output_dir.empty()) return;
  Checkpoint c;
  c.metadata = {{"format", kFormat},
                {"model", config_.model},
                {"batch_size", std::to_string(config_.batch_size)},
                {"seed", std::to_string(config_.seed)},
                {"train_examples", std::to_string(train_.size())},
                {"drop_remainder", config_.drop_remainder ? "true" : "false"},
                {"optimizer", optimizer_->name()},
                {"epoch", std::to_string(progress.epoch)},
                {"step", std::to_string(progress.step)},
                {"loss_sum", number(progress.loss_sum)},
                {"correct", std::to_string(progress.correct)},
                {"seen", std::to_string(progress.seen)},
                {"train_seconds", number(progress.train_seconds)}};
  c.metadata["history"] = nlohmann::json(history).dump();
  for (const auto& [name, p] : model_->named_parameters())
    c.tensors.emplace_back("model." + name, p.value());
  for (const auto& [name, t] : model_->named_buffers())
    c.tensors.emplace_back("buffer." + name, *t);
  for (const auto& [name, t] : optimizer_->state()) c.tensors.emplace_back("optimizer." + name, *t);
  save_checkpoint(checkpoint_path(), c);
}

void Trainer::restore(Progress& progress, std::vector<EpochResult>& history) {
  const std::string path = checkpoint_path();
  if (!std::filesystem::exists(path)) {
    TANDEM_THROW(InvalidArgument, "cannot resume: no checkpoint at '", path, "'");
  }
  const Checkpoint c = load_checkpoint(path);
  if (c.meta("format") != kFormat) {
    TANDEM_THROW(IoError, "'", path, "' is not a trainer checkpoint (format ", c.meta("format"),
                 ")");
  }
  const std::pair<const char*, std::string> expected[] = {
      {"model", config_.model},
      {"batch_size", std::to_string(config_.batch_size)},
      {"seed", std::to_string(config_.seed)},
      {"train_examples", std::to_string(train_.size())},
      {"drop_remainder", config_.drop_remainder ? "true" : "false"},
      {"optimizer", optimizer_->name()}};
  for (const auto& [key, value] : expected) {
    if (c.meta(key) != value) {
      TANDEM_THROW(InvalidArgument, "cannot resume '", path, "': it was written with ", key, " ",
                   c.meta(key), " but this run has ", value);
    }
  }
  auto load_into = [&](const std::string& name, Tensor& target) {
    const Tensor& saved = c.tensor(name);
    if (saved.shape() != target.shape() || saved.dtype() != target.dtype()) {
      TANDEM_THROW(IoError, "checkpoint tensor '", name, "' is ", saved.to_string(), ", expected ",
                   target.to_string());
    }
    target.copy_from(saved);
  };
  for (auto& [name, p] : model_->named_parameters()) {
    Tensor value = p.value();
    load_into("model." + name, value);
  }
  for (auto& [name, t] : model_->named_buffers()) load_into("buffer." + name, *t);
  for (auto& [name, t] : optimizer_->state()) load_into("optimizer." + name, *t);
  progress.epoch = std::stoll(c.meta("epoch"));
  progress.step = std::stoll(c.meta("step"));
  progress.loss_sum = std::stod(c.meta("loss_sum"));
  progress.correct = std::stoll(c.meta("correct"));
  progress.seen = std::stoll(c.meta("seen"));
  progress.train_seconds = std::stod(c.meta("train_seconds"));
  history = nlohmann::json::parse(c.meta("history")).get<std::vector<EpochResult>>();
}

}  // namespace tandem::train
