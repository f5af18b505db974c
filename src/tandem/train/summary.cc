#include "tandem/train/summary.h"

#include "tandem/base/atomic_file.h"
#include "tandem/base/error.h"
#include "tandem/config.h"
#include "tandem/train/detail/epoch_json.h"

namespace tandem::train {

void write_summary(const std::string& path, const TrainConfig& config, const ModelSpec& model,
                   const TrainResult& result,
                   const std::map<std::string, std::string>& extra_config,
                   const std::map<std::string, std::string>& sections) {
  nlohmann::json c = {
      {"model", model.name},
      {"epochs", config.epochs},
      {"batch_size", config.batch_size},
      {"accumulation_steps", config.engine.accumulation_steps},
      {"micro_batch_size", config.micro_batch_size},
      {"zero_stage", config.engine.reducer.zero_stage},
      {"optimizer", optim::optimizer_name(config.engine.optimizer.kind)},
      {"learning_rate", config.engine.optimizer.learning_rate},
      {"momentum", config.engine.optimizer.momentum},
      {"schedule", optim::schedule_name(config.schedule)},
      {"warmup_epochs", config.warmup_epochs},
      {"lr_scaling", config.lr_scaling},
      {"reference_batch", config.reference_batch},
      {"seed", config.engine.seed},
      {"compute_dtype", std::string(dtype_name(model.compute_dtype))},
      {"precision", std::string(precision::policy_name(model.policy))},
      {"loss_scale",
       config.engine.loss_scale
           ? (config.engine.loss_scale->dynamic
                  ? std::string("dynamic")
                  : std::to_string(config.engine.loss_scale->initial_scale))
           : std::string(model.policy == precision::Policy::mixed_float16 ? "dynamic" : "none")},
      {"loss", config.loss.name},
      {"input_feature", config.input_feature},
      {"steps_per_epoch", config.steps_per_epoch},
      {"drop_remainder", config.drop_remainder},
      {"prefetch_batches", config.prefetch_batches},           // -1: autotune
      {"input_parallel_calls", config.input_parallel_calls}};  // -1: autotune
  if (!config.class_names.empty()) c["class_names"] = config.class_names;
  if (!config.arguments.empty()) c["arguments"] = config.arguments;
  for (const auto& [key, value] : extra_config) c[key] = value;
  double examples = 0.0, seconds = 0.0;
  for (const EpochResult& e : result.history) {
    examples += e.examples_per_second * e.train_seconds;
    seconds += e.train_seconds;
  }
  nlohmann::json s = {{"tandem_version", TANDEM_VERSION_STRING},
                      {"config", c},
                      {"epochs", result.history.size()},
                      {"interrupted", result.interrupted},
                      {"paused", result.paused},
                      {"input_exhausted", result.input_exhausted},
                      {"wall_seconds", result.wall_seconds},
                      {"examples_per_second", seconds > 0.0 ? examples / seconds : 0.0},
                      {"history", result.history}};
  if (!result.history.empty()) {
    const EpochResult& last = result.history.back();
    nlohmann::json epoch = last;
    for (const char* key : {"train_loss", "validation_loss"}) s[key] = epoch[key];
    for (const auto& [name, value] : last.train_metrics)
      s["train_" + name] = epoch["train_" + name];
    for (const auto& [name, value] : last.validation_metrics)
      s["validation_" + name] = epoch["validation_" + name];
    s["test_loss"] = epoch["validation_loss"];
    if (epoch.contains("validation_accuracy")) s["test_accuracy"] = epoch["validation_accuracy"];
    s["loss_scale"] = last.loss_scale;
    s["skipped_steps"] = last.skipped_steps;
    s["steps_since_overflow"] = last.steps_since_overflow;
  }
  for (const auto& [name, text] : sections) {
    try {
      s[name] = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      TANDEM_THROW(InvalidArgument, "summary section '", name, "' is not JSON: ", e.what());
    }
  }
  const std::string text = s.dump(2) + "\n";
  const std::string_view parts[] = {text};
  write_file_atomically(path, parts, "summary");
}

}  // namespace tandem::train
