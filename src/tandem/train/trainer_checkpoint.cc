// The Trainer's checkpoints: what it saves (the engine's state streamed in,
// the position and the epoch's sums, the settings a resume must keep) and
// how a run resumes from one.
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tandem/base/error.h"
#include "tandem/precision/policy.h"
#include "tandem/train/detail/epoch_json.h"
#include "tandem/train/detail/trainer_state.h"
#include "tandem/train/evaluation.h"

namespace tandem::train {
namespace {

std::string number(double value) {
  return fmt::format("{}", value);
}

// [trace, squares, samples] (train/noise_scale.h).
std::string noise_scale_averages(const NoiseScaleEstimator& estimator) {
  const NoiseScaleEstimator::Averages a = estimator.averages();
  return nlohmann::json::array({a.trace, a.squares, a.samples}).dump();
}

void read_noise_scale_averages(const std::string& text, const std::string& source,
                               NoiseScaleEstimator& estimator) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array() || j.size() != 3 || !j[0].is_number() || !j[1].is_number() ||
      !std::isfinite(j[0].get<double>()) || !std::isfinite(j[1].get<double>()) ||
      !j[2].is_number_integer() || j[2].get<int64_t>() < 0)
    TANDEM_THROW(
        IoError, "checkpoint '", source,
        "' has malformed noise scale averages (not [finite trace, finite squares, samples >= 0]): ",
        text.substr(0, 80));
  estimator.restore(
      {.trace = j[0].get<double>(), .squares = j[1].get<double>(), .samples = j[2].get<int64_t>()});
}

}  // namespace

std::vector<std::pair<std::string, std::string>> Trainer::resume_settings() {
  return {{"batch_size", std::to_string(config_.batch_size)},
          {"seed", std::to_string(config_.engine.seed)},
          {"steps_per_epoch", std::to_string(config_.steps_per_epoch)},
          {"drop_remainder", config_.drop_remainder ? "true" : "false"},
          {"optimizer", optimizer().name()},
          {"loss", config_.loss.name},
          {"input_feature", config_.input_feature}};
}

void Trainer::write_position(const Progress& progress, const std::vector<EpochResult>& history,
                             std::map<std::string, std::string>& metadata) const {
  nlohmann::json metric_sums = nlohmann::json::array();
  for (size_t i = 0; i < progress.metrics.size(); ++i)
    metric_sums.push_back(
        {config_.metrics[i].name, progress.metrics[i].sum, progress.metrics[i].count});
  const std::pair<const char*, std::string> entries[] = {
      {"epoch", std::to_string(progress.epoch)},
      {"step", std::to_string(progress.step)},
      {"global_step", std::to_string(progress.global_step)},
      {"loss_sum", number(progress.loss_sum)},
      {"examples", std::to_string(progress.examples)},
      {"nonfinite_steps", std::to_string(progress.nonfinite_steps)},
      {"steps_without_update", std::to_string(progress.steps_without_update)},
      {"noise_scale_averages", noise_scale_averages(progress.noise_scale)},
      {"metric_sums", metric_sums.dump()},
      {"train_seconds", number(progress.train_seconds)},
      {"history", nlohmann::json(history).dump()}};
  for (const auto& [key, value] : entries) metadata[key] = value;
}

void Trainer::read_position(const distribute::EngineState& state, const std::string& source,
                            Progress& progress, std::vector<EpochResult>& history) const {
  progress = Progress{};
  progress.metrics.assign(config_.metrics.size(), {});
  try {
    const CheckpointPosition position = checkpoint_position(state, source);
    progress.epoch = position.epoch;
    progress.step = position.step;
    progress.global_step = position.global_step;
    progress.loss_sum = state.meta_number("loss_sum");
    progress.examples = state.meta_integer("examples");
    progress.nonfinite_steps = state.meta_integer("nonfinite_steps");
    // Absent from earlier checkpoints: counted from 0, as they were.
    if (state.metadata.count("steps_without_update"))
      progress.steps_without_update = state.meta_integer("steps_without_update");
    if (state.metadata.count("noise_scale_averages"))
      read_noise_scale_averages(state.meta("noise_scale_averages"), source, progress.noise_scale);
    progress.train_seconds = state.meta_number("train_seconds");
    const nlohmann::json sums = nlohmann::json::parse(state.meta("metric_sums"));
    if (sums.size() != config_.metrics.size()) {
      TANDEM_THROW(InvalidArgument, "cannot resume '", source, "': it was written with ",
                   sums.size(), " metrics but this run has ", config_.metrics.size());
    }
    for (size_t i = 0; i < sums.size(); ++i) {
      if (sums[i].at(0).get<std::string>() != config_.metrics[i].name) {
        TANDEM_THROW(InvalidArgument, "cannot resume '", source, "': metric ", i, " was ",
                     sums[i].at(0).get<std::string>(), ", this run has ", config_.metrics[i].name);
      }
      progress.metrics[i] = {sums[i].at(1).get<double>(), sums[i].at(2).get<double>()};
    }
    history = nlohmann::json::parse(state.meta("history")).get<std::vector<EpochResult>>();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    TANDEM_THROW(IoError, "checkpoint '", source, "' has a malformed position: ", e.what());
  }
  check_position(progress, history, source);
}

// What a trainer writes always holds; a checkpoint that breaks it was
// damaged or edited (the CRC covers the bytes, not their sense). A huge
// global step had the input replay its batches for hours.
void Trainer::check_position(const Progress& p, const std::vector<EpochResult>& history,
                             const std::string& source) const {
  const int64_t per_epoch = config_.steps_per_epoch;
  const bool consistent =
      p.examples >= 0 && p.nonfinite_steps >= 0 && p.steps_without_update >= 0 &&
      p.steps_without_update < kMaxStepsWithoutUpdate && std::isfinite(p.loss_sum) &&
      std::isfinite(p.train_seconds) && p.train_seconds >= 0.0 && p.step <= p.global_step &&
      static_cast<int64_t>(history.size()) == p.epoch &&
      (per_epoch == 0 || (p.step <= per_epoch && p.global_step <= (p.epoch + 1) * per_epoch));
  if (!consistent) {
    TANDEM_THROW(IoError, "checkpoint '", source, "' holds an impossible position (epoch ", p.epoch,
                 ", step ", p.step, ", global step ", p.global_step, ", ", history.size(),
                 " epoch(s) of history, ", p.examples, " examples",
                 per_epoch > 0 ? fmt::format(", {} steps per epoch", per_epoch) : "",
                 "): damaged or edited");
  }
}

void Trainer::save(const Progress& position, const std::vector<EpochResult>& history) {
  // The replicas' partial sums join the saved ones (collective).
  Progress progress = position;
  detail::fold_partial_sums(*strategy_, progress.replica_losses, metric_sums_, progress.loss_sum,
                            progress.metrics);
  if (config_.output_dir.empty() || !strategy_->is_chief()) {
    distribute::DiscardingStateWriter nothing;  // the gathers are collective
    engine_->save_state(nothing);
    return;
  }
  Checkpoint c;  // the trainer's metadata; the engine's state streams in
  write_spec(model_.spec, c.metadata);
  for (const auto& [key, value] : resume_settings()) c.metadata[key] = value;
  const std::pair<const char*, std::string> entries[] = {
      {"format", kTrainerCheckpointFormat},
      {"epochs", std::to_string(config_.epochs)},
      {"loss_record", loss_to_json(config_.loss)},
      {"metrics_record", metrics_to_json(config_.metrics)}};
  for (const auto& [key, value] : entries) c.metadata[key] = value;
  write_position(progress, history, c.metadata);
  if (!config_.class_names.empty())
    c.metadata["class_names"] = nlohmann::json(config_.class_names).dump();
  if (!config_.arguments.empty())
    c.metadata["arguments"] = nlohmann::json(config_.arguments).dump();
  // Written as the engine gives its state: under ZeRO the optimizer state
  // arrives one gathered bucket at a time and is never whole on a device.
  CheckpointWriter writer(checkpoint_path(), c.metadata);
  engine_->save_state(writer);
  writer.commit();
}

const ResumePoint& Trainer::prepare_resume() {
  if (!config_.resume) TANDEM_THROW(InvalidArgument, "prepare_resume() needs config.resume");
  if (pending_resume_) return pending_resume_->point;
  if (!std::filesystem::is_directory(config_.output_dir)) {
    TANDEM_THROW(InvalidArgument, "no run to resume at '", config_.output_dir,
                 "': the directory does not exist");
  }
  const std::string path = checkpoint_path();
  if (!std::filesystem::exists(path)) {
    TANDEM_THROW(InvalidArgument, "no run to resume at '", config_.output_dir, "': it has no ",
                 std::filesystem::path(path).filename().string());
  }
  auto pending = std::make_unique<PendingResume>();
  {
    // Loaded tensors are copied into the model and dropped: temporaries, not
    // activations (the monitor's memory findings read the activation peak).
    MemoryCategoryScope loading(MemoryCategory::workspace);
    pending->checkpoint = load_trainer_checkpoint(path);
  }
  const Checkpoint& c = pending->checkpoint;
  const ModelSpec saved = read_spec(c);
  if (!(saved == model_.spec)) {
    TANDEM_THROW(InvalidArgument, "cannot resume '", path, "': it holds model '", saved.name, "' (",
                 precision::policy_name(saved.policy), ", ", dtype_name(saved.compute_dtype),
                 ", seed ", saved.seed, ") but this run builds '", model_.spec.name, "' (",
                 precision::policy_name(model_.spec.policy), ", ",
                 dtype_name(model_.spec.compute_dtype), ", seed ", model_.spec.seed,
                 saved.definition != model_.spec.definition ? "; the model files differ" : "", ")");
  }
  for (const auto& [key, value] : resume_settings()) {
    if (c.meta(key) != value) {
      TANDEM_THROW(InvalidArgument, "cannot resume '", path, "': it was written with ", key, " ",
                   c.meta(key), " but this run has ", value);
    }
  }
  const std::vector<std::string> classes = checkpoint_class_names(c);
  if (classes != config_.class_names) {
    TANDEM_THROW(InvalidArgument, "cannot resume '", path, "': it was trained on classes ",
                 classes.empty() ? "(none: not an image folder)" : nlohmann::json(classes).dump(),
                 " but this run's data has ",
                 config_.class_names.empty() ? "(none: not an image folder)"
                                             : nlohmann::json(config_.class_names).dump());
  }
  Progress& progress = pending->progress;
  read_position(c, path, progress, pending->history);
  pending->point = {.epoch = progress.epoch,
                    .step = progress.step,
                    .global_step = progress.global_step,
                    .epochs = c.metadata.count("epochs") ? c.meta_integer("epochs") : 0};
  if (progress.epoch >= config_.epochs) {
    TANDEM_THROW(InvalidArgument, "cannot resume '", path, "': the run has trained ",
                 progress.epoch, " epoch(s) and epochs (--epochs) is ", config_.epochs,
                 ", which leaves nothing to train (give more epochs to continue it)");
  }
  pending_resume_ = std::move(pending);
  return pending_resume_->point;
}

}  // namespace tandem::train
