// `tandem plan memory`: each device's predicted peak memory for a training
// run, without training (train/memory_plan.h). It takes the flags of
// `tandem train`, so a training command line is planned by changing its
// first word; a run predicted not to fit its --memory-limit exits 1 naming
// the largest category and the largest batch that fits.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>

#include "tandem/base/error.h"
#include "tandem/cli/commands.h"
#include "tandem/cli/memory_plan_output.h"
#include "tandem/cli/run_setup.h"
#include "tandem/distribute/strategy.h"
#include "tandem/optim/lr_schedule.h"
#include "tandem/train/memory_plan.h"
#include "tandem/train/train_config.h"

namespace tandem::cli {
namespace {

struct PlanOptions : RunOptions {
  int processes = 0;  // multi-worker processes to plan for; 0: the launcher's (or 1)
  bool json = false;
};

int run_plan_memory(PlanOptions& o) {
  RunSetup setup = prepare_run(o);
  train::TrainConfig& config = setup.config;
  // The replicas the run would have, worked out without starting them.
  distribute::StrategyConfig shape = config.strategy;
  int processes = 1;
  if (shape.kind == distribute::StrategyKind::multi_worker) {
    if (o.processes < 0)
      TANDEM_THROW(InvalidArgument, "--processes must be at least 1, got ", o.processes);
    processes = o.processes > 0 ? o.processes : 0;
    if (processes == 0) {
      TANDEM_THROW(InvalidArgument,
                   "planning --strategy multi-worker needs --processes N (the mpirun -np of "
                   "the run)");
    }
    shape.kind = distribute::StrategyKind::mirrored;  // one process's replicas
  } else if (o.processes != 0) {
    TANDEM_THROW(InvalidArgument, "--processes applies to --strategy multi-worker, not ",
                 o.strategy);
  }
  distribute::StrategyLayout layout = distribute::strategy_layout(shape);
  if (config.strategy.kind == distribute::StrategyKind::multi_worker)
    layout.global_replicas = layout.local_replicas * processes;
  train::resolve_batch_sizes(config, layout.global_replicas);
  // What train would refuse is not planned (a plan of settings that cannot
  // run), checked as the Trainer checks it.
  train::check_train_config(config);
  train::TrainConfig scaled = config;
  scaled.engine.optimizer.learning_rate =
      optim::scaled_learning_rate(config.engine.optimizer.learning_rate, config.lr_scaling,
                                  config.batch_size, config.reference_batch);
  train::check_schedule_settings(scaled);
  distribute::check_engine_options(train::engine_options_of(config, setup.model.spec.policy),
                                   layout.global_replicas);
  const std::optional<data::Element> example = setup.data.train.take(1).iterator().next();
  if (!example) TANDEM_THROW(InvalidArgument, "the training data has no examples to plan with");
  const train::MemoryPlan plan = train::plan_memory(
      {.model = setup.model,
       .config = config,
       .layout = layout,
       .example = *example,
       .evaluates = setup.data.validation.has_value(),
       .validation_examples = setup.data.validation ? setup.data.validation->cardinality() : -1,
       .resident_input_bytes = setup.data.resident_bytes,
       .writes_checkpoints = true,
       .chief = true});
  const int64_t limit = memory_limit_of(o, layout.host_replicas);
  if (o.json) {
    fmt::print("{}\n", plan_json(plan, limit, /*measured=*/false));
  } else {
    fmt::print("{} ({} parameters), global batch {}, {}{}, {} replica(s) x {} thread(s)\n",
               setup.model.spec.name, plan.parameter_count, config.batch_size,
               precision::policy_name(setup.policy),
               config.engine.reducer.zero_stage > 0
                   ? fmt::format(", ZeRO-{}", config.engine.reducer.zero_stage)
                   : std::string(),
               layout.global_replicas, layout.threads_per_replica);
    fmt::print("{}", plan_table(plan, limit));
  }
  train::check_memory_limit(plan, limit);
  return 0;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  CLI::App* plan = app.add_subcommand("plan", "Plan a run before starting it");
  plan->require_subcommand(1);
  CLI::App* memory = plan->add_subcommand(
      "memory",
      "Each device's predicted peak memory by category for a training run (tandem train's "
      "model, data, batch, precision, optimizer and strategy flags, checked as train checks "
      "them), without training; exits 1 when it does not fit --memory-limit");
  auto o = std::make_shared<PlanOptions>();
  add_run_options(*memory, *o);
  // tandem train's, so that a training command line plans unchanged (the
  // peak does not depend on it).
  memory->add_option("--epochs", o->config.epochs, "Epochs the run will train (not planned)");
  memory->add_option("--processes", o->processes,
                     "--strategy multi-worker: the number of processes (mpirun -np) to plan for");
  memory->add_flag("--json", o->json, "Print the plan as JSON");
  return {memory, [o]() { return run_plan_memory(*o); }};
}

}  // namespace tandem::cli
