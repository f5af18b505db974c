// `tandem train`: trains a reference model on Fashion-MNIST, checkpointing
// every epoch and on Ctrl-C, and writes summary.json into the run directory.
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/cli/commands.h"
#include "tandem/cli/memory_plan_output.h"
#include "tandem/cli/resume_arguments.h"
#include "tandem/cli/run_outputs.h"
#include "tandem/cli/run_setup.h"
#include "tandem/cli/stop_signals.h"
#include "tandem/cli/trained_rows_log.h"
#include "tandem/comm/launch.h"
#include "tandem/comm/mpi.h"
#include "tandem/data/augment.h"
#include "tandem/data/dataset.h"
#include "tandem/distribute/parameter_server_processes.h"
#include "tandem/distribute/strategy.h"
#include "tandem/interop/torch_state.h"
#include "tandem/monitor/monitor.h"
#include "tandem/monitor/progress_view.h"
#include "tandem/precision/policy.h"
#include "tandem/tensor/allocator.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/memory_plan.h"
#include "tandem/train/run_directory.h"
#include "tandem/train/summary.h"
#include "tandem/train/trainer.h"

namespace tandem::cli {
namespace {

struct TrainOptions : RunOptions {
  bool no_memory_plan = false;
  bool quiet = false;
  bool no_monitor = false;
  int64_t metrics_every = 1;
  std::string trace_steps;  // "FIRST:LAST" global steps, or "STEP"
  std::string tensorboard;  // event files' directory; empty: RUN_DIR/tensorboard
  bool no_tensorboard = false;
  std::string init_from;    // a safetensors file of starting weights
  bool non_strict = false;  // --init-from skips missing and unexpected tensors
};

void print_load_report(const interop::SafetensorsFile& file, const interop::LoadReport& r) {
  fmt::print("  initialised from {}: {} tensors", file.path(), r.loaded.size());
  if (!r.ignored.empty()) fmt::print(", {} BatchNorm batch counters ignored", r.ignored.size());
  fmt::print("\n");
  if (!r.missing.empty()) {
    fmt::print("    not in the file, kept as initialised ({}): {}\n", r.missing.size(),
               fmt::join(r.missing, ", "));
  }
  if (!r.unexpected.empty()) {
    fmt::print("    in the file, not in the model, skipped ({}): {}\n", r.unexpected.size(),
               fmt::join(r.unexpected, ", "));
  }
}

// Under mpirun or tandem launch every process runs this command: without multi-worker each
// would train on its own and write the same run directory (one process is
// just a training).
void check_launcher(const TrainOptions& o, const std::string& strategy) {
  if (strategy == "multi_worker") return;
  const int processes = comm::launched_process_count();
  if (processes == 0 || processes == 1) return;
  // The parameter server's ranks and workers: strategy_layout.
  if (strategy == "parameter_server") return;
  TANDEM_THROW(InvalidArgument, "tandem train was started by ",
               comm::launcher_name(comm::launcher()), " with ",
               processes > 1 ? fmt::format("{} processes", processes) : "several processes",
               " and --strategy ", o.strategy,
               ": each process would train on its own and write the same run directory; add "
               "--strategy multi-worker");
}

// --augment against the data's first example: a crop padding as large as
// the images shifts them out entirely.
void check_augment_fits(const data::AugmentOptions& augment,
                        const std::optional<data::Element>& example) {
  if (!augment.any() || !example || !example->has("image")) return;
  const Tensor& image = example->at("image");
  if (image.rank() != 3) {
    TANDEM_THROW(InvalidArgument,
                 "--augment works on images shaped (height, width, channels); this data's image "
                 "is ",
                 image.shape().to_string());
  }
  try {
    data::check_augment(augment, image.dim(0), image.dim(1));
  } catch (const InvalidArgument& e) {
    TANDEM_THROW(InvalidArgument, "--augment: ", e.what());
  }
}

// --trace-steps against the run's steps, when the data's size is known: a
// window after the last step (or before a resumed run's first) records nothing.
void check_trace_window(const std::string& text, int64_t first, int64_t last,
                        int64_t steps_per_epoch, int64_t epochs, int64_t resumed_at) {
  if (first == 0) return;
  const int64_t total = steps_per_epoch * epochs;
  if (steps_per_epoch > 0 && first > total) {
    TANDEM_THROW(InvalidArgument, "--trace-steps ", text,
                 " starts after the run's last step: it has ", total, " steps (", steps_per_epoch,
                 " per epoch x ", epochs, " epoch(s))");
  }
  if (last <= resumed_at) {
    TANDEM_THROW(InvalidArgument, "--trace-steps ", text, " ends before step ", resumed_at + 1,
                 ", where this resumed run starts");
  }
}

// The run's outputs as the flags ask for them (checked before anything
// loads): the trace window and the TensorBoard directory ("" for none).
struct OutputSettings {
  int64_t trace_first = 0, trace_last = 0;
  std::string tensorboard;
};

OutputSettings check_outputs(TrainOptions& o) {
  train::TrainConfig& config = o.config;
  {
    std::string strategy = o.strategy;
    std::replace(strategy.begin(), strategy.end(), '-', '_');
    check_launcher(o, strategy);
  }
  if (config.resume && config.output_dir.empty())
    TANDEM_THROW(InvalidArgument, "--resume needs --output, the run directory to continue");
  OutputSettings out;
  std::tie(out.trace_first, out.trace_last) = parse_trace_steps(o.trace_steps);
  if (o.metrics_every < 1)
    TANDEM_THROW(InvalidArgument, "--metrics-every must be at least 1, got ", o.metrics_every);
  if (o.no_monitor && out.trace_first > 0)
    TANDEM_THROW(InvalidArgument, "--trace-steps needs the monitor; drop --no-monitor");
  if (!o.tensorboard.empty() && (o.no_monitor || o.no_tensorboard)) {
    TANDEM_THROW(InvalidArgument, "--tensorboard writes the monitor's figures; drop ",
                 o.no_monitor ? "--no-monitor" : "--no-tensorboard");
  }
  if (o.non_strict && o.init_from.empty())
    TANDEM_THROW(InvalidArgument, "--non-strict applies to --init-from; give the weights file");
  if (!o.init_from.empty() && config.resume) {
    TANDEM_THROW(InvalidArgument,
                 "--init-from starts a run from weights and --resume continues one from its "
                 "checkpoint; give one of them");
  }
  // The servers hold the weights there (the replicas' were overwritten).
  if (!o.init_from.empty() &&
      distribute::parse_strategy(o.strategy) == distribute::StrategyKind::parameter_server) {
    TANDEM_THROW(NotImplemented,
                 "--init-from is not applied under --strategy parameter-server (its servers "
                 "hold the weights); start from the file with mirrored or multi-worker training");
  }
  // Once the flags are known to work: the default directory is created.
  if (config.output_dir.empty())
    config.output_dir = default_output_dir(std::filesystem::path(o.model).stem().string());
  // Event files by default in the run directory, as Keras's TensorBoard callback's log_dir.
  out.tensorboard = o.no_tensorboard        ? std::string()
                    : o.tensorboard.empty() ? train::RunDirectory(config.output_dir).tensorboard()
                                            : o.tensorboard;
  return out;
}

// What is checked before any replica is built: the batch against the
// data, --augment against the first example, and the memory plan (its
// shape worked out without building the run, so that a run over the limit
// is refused before anything is allocated).
struct Preflight {
  std::optional<data::Element> example;  // the first training example
  int64_t memory_limit = 0;
  std::optional<train::MemoryPlan> plan;  // none with --no-memory-plan or no example
};

Preflight preflight(const TrainOptions& o, const RunSetup& setup) {
  const distribute::StrategyLayout layout = distribute::strategy_layout(o.config.strategy);
  train::TrainConfig resolved = o.config;
  train::resolve_batch_sizes(resolved, layout.global_replicas);
  train::check_batch_fits(resolved, setup.data.train);
  Preflight out;
  // For the checks of --augment, the memory plan and the monitor's FLOP figures.
  out.example = setup.data.train.take(1).iterator().next();
  check_augment_fits(setup.augment, out.example);
  out.memory_limit = memory_limit_of(o, layout.host_replicas);
  if (!out.example || o.no_memory_plan) return out;
  const RunData& run_data = setup.data;
  out.plan = train::plan_memory(
      {.model = setup.model,
       .config = resolved,
       .layout = layout,
       .example = *out.example,
       .evaluates = run_data.validation.has_value(),
       .validation_examples = run_data.validation ? run_data.validation->cardinality() : -1,
       .resident_input_bytes = run_data.resident_bytes,
       .writes_checkpoints = true,
       // Every process plans the chief's share (the gathered checkpoint
       // state): the same plan everywhere, so that every process of a
       // multi-worker job takes the same decision before any collective.
       .chief = true});
  train::check_memory_limit(*out.plan, out.memory_limit);
  return out;
}

// The chief's notes on how the job was launched and configured.
void print_launch_notes(const TrainOptions& o, const distribute::Strategy& strategy) {
  if (strategy.kind() == distribute::StrategyKind::parameter_server &&
      comm::launched_process_count() > 1 &&
      std::getenv("OMPI_MCA_orte_enable_recovery") == nullptr) {
    fmt::print(stderr,
               "tandem: note: without mpirun --enable-recovery, mpirun ends the whole job when "
               "a worker process dies; with it the parameter server trains on without the "
               "lost worker (docs/sync_async.md)\n");
  }
  if (const std::string advice = comm::mpi_launch_advice(); !advice.empty())
    fmt::print(stderr, "tandem: note: {}\n", advice);
  if (o.zero > 0 && strategy.global_replicas() == 1 && !o.quiet) {
    fmt::print(stderr,
               "tandem: warning: --zero {} with one replica: nothing to shard, the "
               "optimizer state and gradients stay whole\n",
               o.zero);
  }
}

// Reads the checkpoint of a --resume, or checks that a new run's directory
// holds none (before the monitor appends to or starts the run directory's
// files, so a refused run leaves it as it was); the step it resumes after,
// 0 for a new run.
int64_t prepare_resume(train::Trainer& trainer, const train::TrainConfig& config, bool chief) {
  if (!config.resume) {
    trainer.check_fresh_output();
    return 0;
  }
  const train::ResumePoint& point = trainer.prepare_resume();
  if (chief && config.schedule == optim::ScheduleKind::cosine && point.epochs > 0 &&
      point.epochs != config.epochs) {
    fmt::print(stderr,
               "tandem: warning: the run was started for {} epoch(s) and now trains {}: the "
               "cosine schedule is {} over the new total, so the learning rate from step {} on "
               "does not continue the curve the run started on\n",
               point.epochs, config.epochs,
               config.epochs > point.epochs ? "stretched" : "compressed", point.global_step + 1);
  }
  return point.global_step;
}

// "2 in this process"; the parameter server's rank 0 across processes holds
// stand-ins for the workers, which only evaluate.
std::string replicas_here(const distribute::Strategy& strategy) {
  if (strategy.kind() == distribute::StrategyKind::parameter_server &&
      distribute::parameter_server_across_processes() && comm::launched_rank() == 0)
    return "one per worker process; this one serves";
  return fmt::format("{} in this process", strategy.local_replicas());
}

// The lines that open a run: model, data, strategy, batch, optimizer,
// input, memory plan, output, and the --init-from report.
void print_run_header(const TrainOptions& o, const RunSetup& setup, train::Trainer& trainer,
                      const std::optional<train::MemoryPlan>& plan, int64_t memory_limit,
                      const std::optional<interop::SafetensorsFile>& init_weights,
                      const std::optional<interop::LoadReport>& init_report) {
  const train::TrainConfig& config = o.config;
  const train::ModelFactory& factory = setup.model;
  const RunData& run_data = setup.data;
  const data::AugmentOptions& augment = setup.augment;
  const precision::Policy policy = setup.policy;
  const double load_seconds = setup.load_seconds;
  const distribute::Strategy& strategy = trainer.strategy();
  fmt::print("tandem train: {} ({} parameters) on {} (loaded in {:.1f} s)\n", factory.spec.name,
             trainer.model().parameter_count(), run_data.description, load_seconds);
  fmt::print(
      "  strategy {}: {} replica(s) ({}) x {} thread(s), precision {} ({} "
      "matmul{}), global batch {}{}{}, {} lr {} ({}), {} epoch(s)\n",
      strategy.name(), strategy.global_replicas(), replicas_here(strategy),
      strategy.threads_per_replica(), precision::policy_name(policy),
      dtype_name(factory.spec.compute_dtype),
      config.engine.loss_scale
          ? (config.engine.loss_scale->dynamic ? ", dynamic loss scale" : ", fixed loss scale")
          : "",
      config.batch_size,
      config.engine.accumulation_steps > 1
          ? fmt::format(" ({} micro-batches of {} per replica)", config.engine.accumulation_steps,
                        config.micro_batch_size)
          : std::string(),
      config.engine.reducer.zero_stage > 0
          ? fmt::format(", ZeRO-{}", config.engine.reducer.zero_stage)
          : std::string(),
      optim::optimizer_name(config.engine.optimizer.kind), config.engine.optimizer.learning_rate,
      config.lr_scaling == "none"
          ? std::string(optim::schedule_name(config.schedule))
          : fmt::format("{} scaling from batch {}, {}", config.lr_scaling, config.reference_batch,
                        optim::schedule_name(config.schedule)),
      config.epochs);
  if (config.warmup_epochs > 0.0) fmt::print("  warm-up {} epoch(s)\n", config.warmup_epochs);
  if (augment.any() || config.prefetch_batches != 0 || config.input_parallel_calls != 1) {
    const auto setting = [](int v) {
      return v == data::kAutotune ? std::string("auto") : std::to_string(v);
    };
    fmt::print("  input: augment {}, batches built at once {}, prefetch {}\n",
               data::augment_spec(augment), setting(config.input_parallel_calls),
               setting(config.prefetch_batches));
  }
  if (plan) fmt::print("{}", describe_plan(*plan, memory_limit));
  fmt::print("  output {}\n", config.output_dir);
  if (init_report) print_load_report(*init_weights, *init_report);
}

// The monitor (metrics.jsonl, trace, findings, TensorBoard) of the chief,
// which writes the run directory.
// `append`: metrics.jsonl is continued (a resumed run, or an elastic job's
// new chief).
std::unique_ptr<monitor::Monitor> make_monitor(const TrainOptions& o, const RunSetup& setup,
                                               train::Trainer& trainer, int64_t steps_per_epoch,
                                               const std::optional<data::Element>& example,
                                               const OutputSettings& outputs, bool append) {
  const train::TrainConfig& config = o.config;
  const train::ModelFactory& factory = setup.model;
  monitor::RunInfo info = monitor::describe_training_run(trainer, steps_per_epoch, example);
  if (!o.quiet) {
    double forward = 0.0;
    for (const monitor::LayerFlops& l : info.layers) forward += l.forward_flops;
    fmt::print(
        "  monitor: {:.2f} MFLOP per example forward, device peak {:.0f} GFLOP/s ({}), "
        "metrics.jsonl{}\n",
        forward / 1e6, info.peak_flops_per_device / 1e9,
        factory.spec.compute_dtype == DType::bf16 ? "bf16" : "f32",
        outputs.trace_first > 0
            ? fmt::format(", trace of steps {}-{}", outputs.trace_first, outputs.trace_last)
            : std::string());
  }
  return std::make_unique<monitor::Monitor>(
      monitor::MonitorOptions{.run_dir = config.output_dir,
                              .append = append,
                              .metrics_every = o.metrics_every,
                              .trace_first = outputs.trace_first,
                              .trace_last = outputs.trace_last,
                              .tensorboard_dir = outputs.tensorboard},
      std::move(info));
}

// The chief after training: summary.json, the monitor's warnings, and the
// closing lines; the process's exit status.
int finish_run(const TrainOptions& o, const RunSetup& setup, train::Trainer& trainer,
               const train::TrainResult& result, monitor::Monitor* run_monitor,
               const std::optional<train::MemoryPlan>& plan, int64_t memory_limit) {
  const train::TrainConfig& config = o.config;
  const RunData& run_data = setup.data;
  const distribute::Strategy& strategy = trainer.strategy();
  const std::string summary_path = train::RunDirectory(config.output_dir).summary();
  std::map<std::string, std::string> sections;
  if (run_monitor) {
    run_monitor->finish();
    for (const std::string& w : run_monitor->warnings())
      fmt::print(stderr, "tandem: warning: {}\n", w);
    sections["monitor"] = run_monitor->summary_json();
  }
  if (plan) sections["memory_plan"] = plan_json(*plan, memory_limit, /*measured=*/true);
  std::map<std::string, std::string> extra = run_data.summary;
  extra["strategy"] = strategy.name();
  extra["replicas"] = std::to_string(strategy.global_replicas());
  extra["threads_per_replica"] = std::to_string(strategy.threads_per_replica());
  extra["augment"] = data::augment_spec(setup.augment);
  extra["recompute"] = o.recompute ? "true" : "false";
  train::write_summary(summary_path, config, setup.model.spec, result, extra, sections);
  if (result.interrupted) {
    fmt::print("stopped; checkpoint saved to {} (continue with --output {} --resume)\n",
               trainer.checkpoint_path(), config.output_dir);
    return StopSignals::status();
  }
  if (result.paused && !o.quiet) {
    fmt::print(
        "paused after epoch {} of {}; checkpoint saved to {} (continue with --output {} "
        "--resume)\n",
        result.history.size(), config.epochs, trainer.checkpoint_path(), config.output_dir);
  }
  if (!o.quiet && !result.history.empty()) {
    const auto& last = result.history.back();
    const std::vector<std::pair<std::string, double>>& final_metrics =
        run_data.validation ? last.validation_metrics : last.train_metrics;
    std::string figures =
        fmt::format("{} loss {:.4f}", run_data.validation ? "validation" : "train",
                    run_data.validation ? last.validation_loss : last.train_loss);
    for (const auto& [name, value] : final_metrics) {
      figures += name.ends_with("accuracy") ? fmt::format(", {} {:.2f}%", name, 100.0 * value)
                                            : fmt::format(", {} {:.4g}", name, value);
    }
    if (result.input_exhausted)
      fmt::print(stderr,
                 "tandem: warning: the training data ran out before the last epoch ended\n");
    fmt::print("done: {}, {:.1f} s; summary in {}\n", figures, result.wall_seconds, summary_path);
    if (run_monitor) {
      for (const monitor::Finding& f : run_monitor->stats().diagnose())
        fmt::print("  {}\n", f.message);
      fmt::print("  charts and findings: tandem report {}\n", config.output_dir);
    }
  }
  return 0;
}

// A parameter-server worker or shard rank: it serves rank 0 until rank 0
// ends the job (also when a signal stops it: exit 0 then, so that mpirun
// does not abort rank 0 while it writes its checkpoint).
int serve_chief(train::Trainer& trainer) {
  const StopSignals stop_signals(nullptr);
  trainer.serve_remote_work();
  return 0;
}

// The batch sizes and learning rate the Trainer derived (global batch,
// accumulation, micro-batch, the rate scaled to the batch), for the header
// and the summary.
void adopt_derived_settings(train::TrainConfig& config, const train::Trainer& trainer) {
  config.batch_size = trainer.config().batch_size;
  config.engine.accumulation_steps = trainer.config().engine.accumulation_steps;
  config.micro_batch_size = trainer.config().micro_batch_size;
  config.engine.optimizer.learning_rate = trainer.config().engine.optimizer.learning_rate;
}

// What make_monitor needs, kept for a process that becomes the chief of an
// elastic job after training started.
struct MonitorSource {
  const TrainOptions& o;
  const RunSetup& setup;
  train::Trainer& trainer;
  int64_t steps_per_epoch;
  const std::optional<data::Element>& example;
  const OutputSettings& outputs;

  std::unique_ptr<monitor::Monitor> make(bool append) const {
    return make_monitor(o, setup, trainer, steps_per_epoch, example, outputs, append);
  }
};

monitor::ProgressMode progress_mode(const TrainOptions& o, bool chief) {
  if (o.quiet || !chief) return monitor::ProgressMode::quiet;
  return ::isatty(STDOUT_FILENO) != 0 ? monitor::ProgressMode::bar : monitor::ProgressMode::lines;
}

// The first chief of an elastic job was lost and this process took over: it
// carries the run's metrics.jsonl on (after a run header of its own) and
// reports the new membership.
void on_membership_change(const MonitorSource& source,
                          std::unique_ptr<monitor::Monitor>& run_monitor,
                          const train::MembershipChange& c) {
  const TrainOptions& o = source.o;
  const bool chief = source.trainer.strategy().is_chief();
  if (!run_monitor && !o.no_monitor && chief) {
    try {
      std::error_code ignored;  // the monitor names a directory it cannot write
      std::filesystem::create_directories(o.config.output_dir, ignored);
      run_monitor = source.make(/*append=*/true);
    } catch (const Error& e) {
      fmt::print(stderr, "tandem: warning: the new chief cannot continue metrics.jsonl: {}\n",
                 e.what());
    }
  }
  if (run_monitor) run_monitor->on_membership_change(c);
  if (chief && !o.quiet) {
    // Only the lists that hold someone ("joined " with nobody before).
    std::vector<std::string> changes;
    if (!c.lost.empty()) changes.push_back(fmt::format("lost {}", fmt::join(c.lost, ",")));
    if (!c.joined.empty()) changes.push_back(fmt::format("joined {}", fmt::join(c.joined, ",")));
    fmt::print(stderr,
               "elastic: generation {}: {} worker(s){}: {}; going on from step {} ({} step(s) "
               "taken again, {:.2f} s), {} examples per worker\n",
               c.generation, c.members.size(),
               changes.empty() ? std::string() : fmt::format(" ({})", fmt::join(changes, ", ")),
               c.reason, c.global_step, c.rolled_back_steps, c.seconds, c.process_batch);
  }
}

// The monitor and the progress view see every step and epoch.
train::TrainCallbacks run_callbacks(const MonitorSource& source,
                                    std::unique_ptr<monitor::Monitor>& run_monitor,
                                    monitor::ProgressView& view) {
  // Pointers to run_train's objects, which outlive fit().
  std::unique_ptr<monitor::Monitor>* monitor = &run_monitor;
  monitor::ProgressView* progress = &view;
  const MonitorSource* from = &source;
  train::TrainCallbacks callbacks;
  callbacks.on_step = [monitor, progress](const train::StepInfo& s) {
    if (*monitor) (*monitor)->on_step(s);
    progress->on_step(s);
  };
  callbacks.on_epoch = [monitor, progress](const train::EpochResult& e) {
    if (*monitor) (*monitor)->on_epoch(e);
    progress->on_epoch(e);
  };
  callbacks.on_membership_change = [from, monitor](const train::MembershipChange& c) {
    on_membership_change(*from, *monitor, c);
  };
  return callbacks;
}

// fit() with SIGINT/SIGTERM checkpointing, the memory plan's measured side
// (the high-water marks from here on) reset first.
train::TrainResult fit_under_signals(train::Trainer& trainer, const RunSetup& setup,
                                     const train::TrainCallbacks& callbacks) {
  const StopSignals stop_signals(&trainer);
  const distribute::Strategy& strategy = trainer.strategy();
  for (int r = 0; r < strategy.local_replicas(); ++r)
    allocator_for(strategy.device(r)).reset_high_water();
  return trainer.fit(setup.data.train, setup.data.validation, callbacks);
}

// The phases of `tandem train`: check the flags and outputs, set the run up
// and plan its memory, build the trainer (or serve the chief), take over
// what it derived, load weights or resume, print the header, watch, fit,
// finish.
int run_train(TrainOptions& o) {
  train::TrainConfig& config = o.config;
  const OutputSettings outputs = check_outputs(o);
  // Opened (its header checked) before the data loads, so that a bad file fails fast.
  std::optional<interop::SafetensorsFile> init_weights;
  if (!o.init_from.empty()) init_weights.emplace(o.init_from);
  RunSetup setup = prepare_run(o);
  const Preflight checked = preflight(o, setup);

  train::Trainer trainer(config, setup.model);
  if (trainer.strategy().serves_chief()) return serve_chief(trainer);
  const bool chief = trainer.strategy().is_chief();
  if (chief) print_launch_notes(o, trainer.strategy());
  adopt_derived_settings(config, trainer);
  const int64_t steps_per_epoch = trainer.steps_per_epoch(setup.data.train);
  std::optional<interop::LoadReport> init_report;
  if (init_weights)
    init_report = interop::load_safetensors(*init_weights, trainer, {.strict = !o.non_strict});
  const int64_t resumed_at = prepare_resume(trainer, config, chief);
  check_trace_window(o.trace_steps, outputs.trace_first, outputs.trace_last, steps_per_epoch,
                     config.epochs, resumed_at);
  if (!o.quiet && chief)
    print_run_header(o, setup, trainer, checked.plan, checked.memory_limit, init_weights,
                     init_report);

  const MonitorSource source{o, setup, trainer, steps_per_epoch, checked.example, outputs};
  std::unique_ptr<monitor::Monitor> run_monitor;
  if (chief && !o.no_monitor) run_monitor = source.make(config.resume);
  monitor::ProgressView view(progress_mode(o, chief), config.epochs,
                             config.engine.loss_scale.has_value(), run_monitor.get());
  train::TrainCallbacks callbacks = run_callbacks(source, run_monitor, view);
  callbacks.on_batch = trained_rows_log(trainer.config().input_feature);
  const train::TrainResult result = fit_under_signals(trainer, setup, callbacks);
  // An elastic job's chief may have changed (the first one lost): the
  // chief now writes the summary.
  if (!trainer.strategy().is_chief()) return result.interrupted ? StopSignals::status() : 0;
  return finish_run(o, setup, trainer, result, run_monitor.get(), checked.plan,
                    checked.memory_limit);
}

// Registers tandem train's options on `command`, bound to `o`.
void add_train_options(CLI::App* command, TrainOptions* o) {
  train::TrainConfig& c = o->config;
  add_run_options(*command, *o);
  command->add_option("--epochs", c.epochs, "Epochs to train")->capture_default_str();
  command->add_flag("--no-memory-plan", o->no_memory_plan,
                    "Skip the memory plan (and the --memory-limit check) before training");
  command->add_option("--output,-o", c.output_dir, "Run directory (default: runs/MODEL-TIMESTAMP)");
  command->add_flag("--resume", c.resume,
                    "Continue from the checkpoint in --output (a cosine schedule is stretched "
                    "over a new --epochs)");
  command->add_option("--checkpoint-every", c.checkpoint_every,
                      "Also write the checkpoint every N steps, not only at each epoch's end, so "
                      "that a killed run loses at most N steps (0: off)");
  command
      ->add_option("--elastic-copy-every", c.elastic_copy_every,
                   "Under tandem launch --elastic: keep an in-memory copy of the training "
                   "state every N steps, which a lost worker rolls the others back to")
      ->capture_default_str();
  command->add_option("--stop-after-epochs", c.stop_after_epochs,
                      "Stop after this epoch of the --epochs-long run, checkpoint saved; "
                      "--resume continues with the same schedule (0: off)");
  command->add_option("--tensorboard", o->tensorboard,
                      "TensorBoard event files' directory (default: RUN_DIR/tensorboard)");
  command->add_flag("--no-tensorboard", o->no_tensorboard, "Write no TensorBoard event files");
  command->add_option("--init-from", o->init_from,
                      "Start from the weights of a safetensors file (PyTorch names and layouts; "
                      "docs/interop.md)");
  command->add_flag("--non-strict", o->non_strict,
                    "With --init-from: skip tensors the file lacks or the model does not have "
                    "(shapes must still match)");
  command->add_flag("--quiet,-q", o->quiet, "Print nothing but errors");
  command->add_flag("--no-monitor", o->no_monitor,
                    "Skip metrics.jsonl, memory snapshots and findings (the summary keeps the "
                    "run's results)");
  command
      ->add_option("--metrics-every", o->metrics_every,
                   "Write a metrics.jsonl line every N steps (epoch lines always)")
      ->capture_default_str();
  command->add_option("--trace-steps", o->trace_steps,
                      "Record a Chrome trace (trace.json) of global steps FIRST:LAST (FIRST at "
                      "most the run's last step)");
}

// A train command line parsed on its own (a run's recorded arguments).
struct TrainCommandLine {
  CLI::App app{"", "train"};
  TrainOptions options;
};

std::unique_ptr<TrainCommandLine> parse_train_arguments(std::vector<std::string> args) {
  auto line = std::make_unique<TrainCommandLine>();
  add_train_options(&line->app, &line->options);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    line->app.parse(args);
  } catch (const CLI::ParseError& e) {
    TANDEM_THROW(InvalidArgument, "the run's recorded arguments do not parse: ", e.what());
  }
  return line;
}

// The arguments a --resume of the run in `o`'s output continues with (the
// recorded ones, with what may change taken from `command`), or nothing
// for a run that recorded none (made before runs recorded them, or in
// code) or has no readable checkpoint (run_train says so).
std::optional<std::vector<std::string>> resumed_arguments(const CLI::App& command,
                                                          const TrainOptions& o) {
  const std::filesystem::path path = train::RunDirectory(o.config.output_dir).checkpoint();
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return std::nullopt;
  std::map<std::string, std::string> metadata;
  try {
    // The header alone: the run loads the whole checkpoint once, later.
    metadata = train::read_checkpoint_metadata(path.string());
  } catch (const IoError&) {
    return std::nullopt;  // run_train reports the unreadable checkpoint
  }
  const std::optional<std::vector<std::string>> recorded =
      recorded_arguments(metadata, path.string());
  if (!recorded) {
    if (!o.quiet) {
      fmt::print(stderr,
                 "tandem: warning: the run in {} recorded no arguments (it predates that): "
                 "its settings come from this command line\n",
                 o.config.output_dir);
    }
    return std::nullopt;
  }
  return resume_arguments(command, parse_train_arguments(*recorded)->app);
}

int run_train_command(const CLI::App& command, TrainOptions& o) {
  if (o.config.resume) {
    if (const auto args = resumed_arguments(command, o)) {
      auto line = parse_train_arguments(*args);
      if (!o.quiet) {
        std::string text;
        for (const std::string& a : *args) text += " " + a;
        fmt::print("resuming {} with the run's settings:{}\n", o.config.output_dir, text);
      }
      line->options.config.output_dir = o.config.output_dir;
      line->options.config.resume = true;
      line->options.config.arguments = *args;
      return run_train(line->options);
    }
  }
  o.config.arguments = given_arguments(command);
  const bool default_directory = o.config.output_dir.empty();
  try {
    return run_train(o);
  } catch (const Error&) {
    // A run refused before it wrote anything (a bad --lr, an engine
    // setting the Trainer refuses) leaves no empty runs/MODEL-TIMESTAMP.
    std::error_code ignored;
    if (default_directory && !o.config.output_dir.empty() &&
        std::filesystem::is_empty(o.config.output_dir, ignored) && !ignored)
      std::filesystem::remove(o.config.output_dir, ignored);
    throw;
  }
}

}  // namespace

Command add_train_command(CLI::App& app) {
  CLI::App* command =
      app.add_subcommand("train",
                         "Train a model (built-in or from a file) on Fashion-MNIST or "
                         "on data described by --data");
  auto o = std::make_shared<TrainOptions>();
  add_train_options(command, o.get());
  return {command, [command, o]() { return run_train_command(*command, *o); }};
}

}  // namespace tandem::cli
