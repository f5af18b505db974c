// `tandem tune batch-size`: the batch-size finder (tune/batch_size_finder.h)
// on a run described by the flags of `tandem train`: the largest batch that
// fits, throughput along a series of batches, the gradient noise scale, and
// the recommended global batch with its learning rate and warm-up.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "tandem/base/atomic_file.h"
#include "tandem/base/detail/json_number.h"
#include "tandem/base/error.h"
#include "tandem/cli/commands.h"
#include "tandem/cli/run_setup.h"
#include "tandem/monitor/svg_chart.h"
#include "tandem/tune/batch_size_finder.h"

namespace tandem::cli {
namespace {

struct TuneOptions : RunOptions {
  std::optional<int64_t> min_batch;  // default: 8 per replica
  int64_t max_batch = 8192;
  int64_t steps = 10;
  int64_t noise_steps = 50;
  std::string report;  // HTML page; empty: none
  bool json = false;
};

std::string html_page(const tune::BatchSizeRecommendation& r, const std::string& command) {
  monitor::Series speed{.name = "examples/s", .color = "#4e79a7", .markers = true};
  monitor::Series time{
      .name = "predicted time to a target (1: best)", .color = "#e15759", .markers = true};
  std::string rows;
  for (const tune::BatchSizeTrial& t : r.trials) {
    speed.x.push_back(std::log2(static_cast<double>(t.batch)));
    speed.y.push_back(t.examples_per_second);
    time.x.push_back(std::log2(static_cast<double>(t.batch)));
    time.y.push_back(t.relative_time);
    rows += fmt::format("<tr><td>{}</td><td>{:.1f}</td><td>{:.1f} MiB</td><td>{:.2f}</td></tr>",
                        t.batch, t.examples_per_second,
                        static_cast<double>(t.predicted_peak_bytes) / (1 << 20), t.relative_time);
  }
  return fmt::format(
      R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tandem tune batch-size</title>
<style>body {{ font-family: sans-serif; margin: 24px; }} td, th {{ padding: 3px 12px 3px 0; text-align: left; }}
svg.chart {{ border: 1px solid #ddd; }}</style></head><body>
<h1>Batch size for {}</h1>
<p>Largest batch that fits: {}. Gradient noise scale: about {:.0f} examples. Recommended global
batch <b>{}</b>, learning rate {:.4g} ({} scaling from batch {}), warm-up {:.2g} epoch(s).</p>
<table><tr><th>global batch</th><th>examples/s</th><th>predicted peak per device</th>
<th>predicted time to a target</th></tr>{}</table>
<div>{}{}</div></body></html>
)",
      command, r.largest_fitting_batch, r.noise_scale, r.batch, r.learning_rate, r.lr_scaling,
      r.reference_batch, r.warmup_epochs, rows,
      monitor::line_chart({.id = "speed",
                           .title = "Throughput",
                           .x_label = "log2(global batch)",
                           .y_label = "examples/s",
                           .series = {speed}}),
      monitor::line_chart({.id = "time",
                           .title = "Predicted time to a target, (B + B_noise) / throughput",
                           .x_label = "log2(global batch)",
                           .y_label = "relative to the best",
                           .series = {time}}));
}

int run_tune_batch_size(TuneOptions& o) {
  RunSetup setup = prepare_run(o);
  train::TrainConfig& config = setup.config;
  const distribute::StrategyLayout layout = distribute::strategy_layout(config.strategy);
  train::resolve_batch_sizes(config, layout.global_replicas);
  if (o.steps < 1) TANDEM_THROW(InvalidArgument, "--steps must be at least 1, got ", o.steps);
  if (o.noise_steps < 1)
    TANDEM_THROW(InvalidArgument, "--noise-steps must be at least 1, got ", o.noise_steps);
  if (o.min_batch && *o.min_batch < 1)
    TANDEM_THROW(InvalidArgument, "--min-batch must be at least 1, got ", *o.min_batch);
  if (o.max_batch < layout.global_replicas) {
    TANDEM_THROW(InvalidArgument, "--max-batch must be at least the ", layout.global_replicas,
                 " replicas, got ", o.max_batch);
  }
  if (o.min_batch && *o.min_batch > o.max_batch) {
    TANDEM_THROW(InvalidArgument, "--min-batch ", *o.min_batch, " is above --max-batch ",
                 o.max_batch);
  }
  if (!o.json) {
    fmt::print("tandem tune batch-size: {} on {}, {} replica(s); your batch {} at lr {}\n",
               setup.model.spec.name, setup.data.description, layout.global_replicas,
               config.batch_size, config.engine.optimizer.learning_rate);
    fmt::print("{:>12} {:>12} {:>16}\n", "global batch", "examples/s", "predicted peak");
  }
  const tune::BatchSizeRecommendation r = tune::find_batch_size(
      {.model = setup.model,
       .config = config,
       .train = setup.data.train,
       .resident_input_bytes = setup.data.resident_bytes,
       .memory_limit = memory_limit_of(o, layout.host_replicas),
       .min_batch = o.min_batch.value_or(0),
       .max_batch = o.max_batch,
       .timed_steps = o.steps,
       .noise_steps = o.noise_steps},
      [&](const tune::BatchSizeTrial& t) {
        if (!o.json)
          fmt::print("{:>12} {:>12.1f} {:>12.1f} MiB\n", t.batch, t.examples_per_second,
                     static_cast<double>(t.predicted_peak_bytes) / (1 << 20));
      });
  // Under the run's own --lr-scaling the trainer scales its --lr to the new
  // batch itself: the command keeps that --lr (printing the scaled rate had
  // it scaled twice).
  const std::string lr =
      config.lr_scaling == "none" ? fmt::format(" --lr {:.4g}", r.learning_rate) : std::string();
  const std::string command =
      fmt::format("--batch-size {}{} --warmup-epochs {:.2g}", r.batch, lr, r.warmup_epochs);
  if (o.json) {
    nlohmann::json trials = nlohmann::json::array();
    for (const tune::BatchSizeTrial& t : r.trials) {
      trials.push_back({{"batch", t.batch},
                        {"examples_per_second", t.examples_per_second},
                        {"predicted_peak_bytes", t.predicted_peak_bytes},
                        {"relative_time", t.relative_time}});
    }
    fmt::print("{}\n",
               nlohmann::json{{"largest_fitting_batch", r.largest_fitting_batch},
                              {"noise_scale", tandem::detail::number_or_null(r.noise_scale)},
                              {"trials", trials},
                              {"batch", r.batch},
                              {"learning_rate", r.learning_rate},
                              {"lr_scaling", r.lr_scaling},
                              {"reference_batch", r.reference_batch},
                              {"warmup_epochs", r.warmup_epochs}}
                   .dump());
  } else {
    // Against the run's own batch when it was timed (outside the trials'
    // range it was not: "nanx" was printed).
    std::string against =
        fmt::format("your batch {} was not timed (outside the trials' range)", config.batch_size);
    for (const tune::BatchSizeTrial& t : r.trials) {
      if (t.batch == config.batch_size)
        against = fmt::format("predicted time to a target {:.2f}x of your batch's",
                              1.0 / t.relative_time);
    }
    fmt::print(
        "largest batch that fits: {}; gradient noise scale: about {:.0f} examples (after the "
        "first {} steps; it grows as training goes on)\n"
        "recommended: global batch {} ({}), "
        "learning rate {:.4g} ({} scaling from batch {}), warm-up {:.2g} epoch(s)\n"
        "  tandem train ... {}\n",
        r.largest_fitting_batch, r.noise_scale, o.noise_steps, r.batch, against, r.learning_rate,
        r.lr_scaling, r.reference_batch, r.warmup_epochs, command);
  }
  if (!o.report.empty()) {
    const std::string html = html_page(r, setup.model.spec.name);
    const std::string_view parts[] = {html};
    write_file_atomically(o.report, parts, "report");
  }
  return 0;
}

}  // namespace

Command add_tune_command(CLI::App& app) {
  CLI::App* tune = app.add_subcommand("tune", "Tune a run before training it");
  tune->require_subcommand(1);
  CLI::App* batch = tune->add_subcommand(
      "batch-size",
      "The global batch that reaches a target loss soonest here, with its learning rate (the "
      "flags of tandem train; docs/tuning.md)");
  auto o = std::make_shared<TuneOptions>();
  add_run_options(*batch, *o);
  // tandem train's too: the run's length sets the warm-up recommended with
  // a larger batch (a fifth of it, at most 5 epochs).
  batch->add_option("--epochs", o->config.epochs, "Epochs the run will train")
      ->capture_default_str();
  batch->add_option("--max-batch", o->max_batch, "The largest global batch to try")
      ->capture_default_str();
  batch->add_option("--min-batch", o->min_batch,
                    "The smallest global batch to try (default: 8 per replica)");
  batch->add_option("--steps", o->steps, "Timed steps per batch size")->capture_default_str();
  batch
      ->add_option("--noise-steps", o->noise_steps,
                   "Steps of the run that measures the gradient noise scale (it grows as "
                   "training goes on)")
      ->capture_default_str();
  batch->add_option("--report", o->report, "Write an HTML page with the table and charts");
  batch->add_flag("--json", o->json, "Print the result as JSON");
  return {batch, [o]() { return run_tune_batch_size(*o); }};
}

}  // namespace tandem::cli
