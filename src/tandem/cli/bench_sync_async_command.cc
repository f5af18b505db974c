// `tandem bench sync-async`: the same model trained under each update rule
// (synchronous all-reduce, backup workers, bounded staleness, fully
// asynchronous, local SGD), with every replica at full speed and with one
// made slower, over several seeds: throughput, steps per second, time to a
// target validation accuracy, final accuracy, staleness and dropped
// examples. Runs are interleaved (seed by seed, every mode and condition in
// turn), so that the machine's drift reaches every variant alike. Each run
// is what `tandem train` with the mode's flags trains (prepare_run builds
// it), on Fashion-MNIST.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "tandem/base/detail/json_number.h"
#include "tandem/base/error.h"
#include "tandem/base/statistics.h"
#include "tandem/cli/commands.h"
#include "tandem/cli/run_setup.h"
#include "tandem/train/trainer.h"

namespace tandem::cli {
namespace {

struct SyncAsyncOptions {
  std::string model = "cnn";
  std::string modes = "sync,backup,ssp1,ssp4,async,local8";
  int64_t epochs = 5;
  int devices = 2;
  double slow_factor =
      2.0;  // replica 1 under the straggler condition; 1: that condition is skipped
  int seeds = 3;
  double target = 0.90;  // validation accuracy
  std::string data_dir = data::default_fashion_mnist_dir();
  int64_t train_examples = 0, test_examples = 0;
  std::optional<double> learning_rate;  // unset: tandem train's default
  bool json = false;
};

struct Mode {
  std::string name, description;
  void (*apply)(RunOptions&);
};

const std::vector<Mode>& all_modes() {
  static const std::vector<Mode> modes = {
      {"sync", "synchronous all-reduce (mirrored)", [](RunOptions& o) { o.strategy = "mirrored"; }},
      {"backup", "parameter server, synchronous, 1 backup worker",
       [](RunOptions& o) {
         o.strategy = "parameter-server";
         o.max_staleness = "0";
         o.backup_workers = 1;
       }},
      {"ssp1", "parameter server, staleness <= 1",
       [](RunOptions& o) {
         o.strategy = "parameter-server";
         o.max_staleness = "1";
       }},
      {"ssp4", "parameter server, staleness <= 4",
       [](RunOptions& o) {
         o.strategy = "parameter-server";
         o.max_staleness = "4";
       }},
      {"async", "parameter server, fully asynchronous",
       [](RunOptions& o) { o.strategy = "parameter-server"; }},
      {"local8", "local SGD, parameters averaged every 8 steps",
       [](RunOptions& o) {
         o.strategy = "mirrored";
         o.sync_every = 8;
       }},
  };
  return modes;
}

struct Outcome {
  double examples_per_second = 0.0;  // examples trained (forward and backward) per second
  double steps_per_second = 0.0;     // global batches per second
  double time_to_target = NAN;       // training seconds until validation reached the target
  double final_accuracy = NAN;
  double mean_staleness = NAN;
  double dropped_fraction = 0.0;  // of the examples handed out, whose gradient was dropped
  double update_fraction = 0.0;   // of the replicas' time spent updating (the servers' work)
};

Outcome train_once(const SyncAsyncOptions& b, const Mode& mode, bool straggler, int seed) {
  RunOptions o;
  o.model = b.model;
  o.config.epochs = b.epochs;
  o.devices = b.devices;
  o.threads = 1;
  o.allow_oversubscription = true;
  o.seed = std::to_string(seed);
  o.data_dir = b.data_dir;
  o.train_examples = b.train_examples;
  o.test_examples = b.test_examples;
  o.learning_rate = b.learning_rate;
  mode.apply(o);
  if (straggler) o.slow_replica = fmt::format("1:{}", b.slow_factor);
  RunSetup setup = prepare_run(o);
  train::Trainer trainer(setup.config, setup.model);
  const int64_t steps_per_epoch = trainer.steps_per_epoch(setup.data.train);
  Outcome out;
  double seconds = 0.0, update = 0.0, replica_seconds = 0.0;
  int64_t examples = 0, steps = 0, dropped = 0, stale_sum = 0, stale_count = 0;
  train::TrainCallbacks callbacks;
  callbacks.on_step = [&](const train::StepInfo& s) {
    for (const auto& r : s.replicas) {
      update += r.optimizer;
      replica_seconds += r.forward + r.backward + r.idle + r.communication + r.optimizer;
    }
  };
  callbacks.on_epoch = [&](const train::EpochResult& e) {
    seconds += e.train_seconds;
    examples += e.train_examples;
    steps += steps_per_epoch;
    for (int64_t d : e.dropped_examples) dropped += d;
    for (size_t k = 0; k < e.staleness.size(); ++k) {
      stale_sum += static_cast<int64_t>(k) * e.staleness[k];
      stale_count += e.staleness[k];
    }
    const double accuracy = e.validation_metric("accuracy");
    out.final_accuracy = accuracy;
    if (std::isnan(out.time_to_target) && accuracy >= b.target) out.time_to_target = seconds;
  };
  trainer.fit(setup.data.train, setup.data.validation, callbacks);
  out.examples_per_second = static_cast<double>(examples) / seconds;
  out.steps_per_second = static_cast<double>(steps) / seconds;
  if (stale_count > 0)
    out.mean_staleness = static_cast<double>(stale_sum) / static_cast<double>(stale_count);
  const int64_t handed_out = setup.data.train.cardinality() * b.epochs;
  out.dropped_fraction =
      handed_out > 0 ? static_cast<double>(dropped) / static_cast<double>(handed_out) : 0.0;
  out.update_fraction = replica_seconds > 0.0 ? update / replica_seconds : 0.0;
  return out;
}

// Medians over the seeds (NaN when a seed has none: a target not reached).
double median_of(const std::vector<Outcome>& runs, double Outcome::*field) {
  std::vector<double> v;
  for (const Outcome& r : runs) {
    if (std::isnan(r.*field)) return NAN;
    v.push_back(r.*field);
  }
  return median(std::move(v));
}

// --modes: the named modes, in order.
std::vector<const Mode*> parse_modes(const std::string& list) {
  std::vector<const Mode*> modes;
  for (const std::string& name : split_list(list)) {
    const auto& known = all_modes();
    const auto it =
        std::find_if(known.begin(), known.end(), [&](const Mode& m) { return m.name == name; });
    if (it == known.end()) {
      TANDEM_THROW(InvalidArgument, "unknown mode '", name,
                   "' in --modes (expected sync, backup, ssp1, ssp4, async or local8)");
    }
    modes.push_back(&*it);
  }
  if (modes.empty()) TANDEM_THROW(InvalidArgument, "--modes names no mode");
  return modes;
}

// Each seed's run of one mode and condition, for --json.
nlohmann::json seeds_json(const std::vector<Outcome>& runs) {
  nlohmann::json seeds = nlohmann::json::array();
  for (const Outcome& r : runs) {
    seeds.push_back({{"examples_per_second", r.examples_per_second},
                     {"steps_per_second", r.steps_per_second},
                     {"time_to_target", tandem::detail::number_or_null(r.time_to_target)},
                     {"final_accuracy", tandem::detail::number_or_null(r.final_accuracy)}});
  }
  return seeds;
}

int run_bench_sync_async(const SyncAsyncOptions& b) {
  if (b.seeds < 1 || b.epochs < 1 || b.devices < 2) {
    TANDEM_THROW(InvalidArgument,
                 "--seeds and --epochs must be at least 1 and --devices at "
                 "least 2, got ",
                 b.seeds, ", ", b.epochs, " and ", b.devices);
  }
  // Checked now, not when the first straggler run builds its engine.
  if (!(b.slow_factor >= 1.0 && b.slow_factor <= distribute::kMaxSlowFactor) ||
      !(b.target > 0.0 && b.target <= 1.0)) {
    TANDEM_THROW(InvalidArgument, "--slow-factor must be in [1, ", distribute::kMaxSlowFactor,
                 "] and --target in (0, 1], got ", b.slow_factor, " and ", b.target);
  }
  const std::vector<const Mode*> modes = parse_modes(b.modes);
  const std::vector<bool> conditions =
      b.slow_factor > 1.0 ? std::vector<bool>{false, true} : std::vector<bool>{false};
  // results[condition][mode][seed]
  std::vector<std::vector<std::vector<Outcome>>> results(
      conditions.size(), std::vector<std::vector<Outcome>>(modes.size()));
  for (int seed = 1; seed <= b.seeds; ++seed) {
    for (size_t c = 0; c < conditions.size(); ++c) {
      for (size_t m = 0; m < modes.size(); ++m) {
        results[c][m].push_back(train_once(b, *modes[m], conditions[c], seed));
        // Progress on stderr, with --json too: a whole table takes an hour.
        const Outcome& r = results[c][m].back();
        fmt::print(stderr, "  seed {} {:<6} {:<9} {:>7.0f} ex/s  accuracy {:.4f}\n", seed,
                   modes[m]->name, conditions[c] ? "straggler" : "even", r.examples_per_second,
                   r.final_accuracy);
      }
    }
  }
  nlohmann::json rows = nlohmann::json::array();
  if (!b.json) {
    fmt::print(
        "sync-async: {} on {} replicas x 1 thread, {} epoch(s), {} seed(s); straggler: "
        "replica 1 {}x slower; target {:.1f}% validation accuracy\n",
        b.model, b.devices, b.epochs, b.seeds, b.slow_factor, 100 * b.target);
    fmt::print("{:<7} {:<9} {:>8} {:>7} {:>8} {:>7} {:>10} {:>9} {:>9} {:>8} {:>7}\n", "mode",
               "replicas", "ex/s", "vs sync", "steps/s", "vs sync", "to target", "accuracy",
               "staleness", "dropped", "update");
  }
  for (size_t c = 0; c < conditions.size(); ++c) {
    const double sync_eps = median_of(results[c][0], &Outcome::examples_per_second);
    const double sync_steps = median_of(results[c][0], &Outcome::steps_per_second);
    for (size_t m = 0; m < modes.size(); ++m) {
      const auto& runs = results[c][m];
      const double eps = median_of(runs, &Outcome::examples_per_second);
      const double steps = median_of(runs, &Outcome::steps_per_second);
      const double to_target = median_of(runs, &Outcome::time_to_target);
      const double accuracy = median_of(runs, &Outcome::final_accuracy);
      const double staleness = median_of(runs, &Outcome::mean_staleness);
      const double dropped = median_of(runs, &Outcome::dropped_fraction);
      const double update = median_of(runs, &Outcome::update_fraction);
      rows.push_back({{"mode", modes[m]->name},
                      {"description", modes[m]->description},
                      {"straggler", conditions[c]},
                      {"examples_per_second", eps},
                      {"examples_per_second_vs_first_mode", eps / sync_eps},
                      {"steps_per_second", steps},
                      {"steps_per_second_vs_first_mode", steps / sync_steps},
                      {"time_to_target_seconds", tandem::detail::number_or_null(to_target)},
                      {"final_accuracy", tandem::detail::number_or_null(accuracy)},
                      {"mean_staleness", tandem::detail::number_or_null(staleness)},
                      {"dropped_fraction", dropped},
                      {"update_fraction", update},
                      {"seeds", seeds_json(runs)}});
      if (!b.json) {
        fmt::print(
            "{:<7} {:<9} {:>8.0f} {:>6.2f}x {:>8.1f} {:>6.2f}x {:>10} {:>8.2f}% {:>9} "
            "{:>7.1f}% {:>6.1f}%\n",
            modes[m]->name, conditions[c] ? "straggler" : "even", eps, eps / sync_eps, steps,
            steps / sync_steps,
            std::isfinite(to_target) ? fmt::format("{:.0f} s", to_target) : "not reached",
            100 * accuracy, std::isfinite(staleness) ? fmt::format("{:.2f}", staleness) : "-",
            100 * dropped, 100 * update);
      }
    }
  }
  if (b.json) {
    fmt::print("{}\n",
               nlohmann::json{{"bench", "sync-async"},
                              {"model", b.model},
                              {"devices", b.devices},
                              {"epochs", b.epochs},
                              {"seeds", b.seeds},
                              {"slow_factor", b.slow_factor},
                              {"target", b.target},
                              {"learning_rate", b.learning_rate ? nlohmann::json(*b.learning_rate)
                                                                : nlohmann::json(nullptr)},
                              {"results", rows}}
                   .dump(2));
  } else {
    fmt::print(
        "(medians over the seeds; 'vs sync' against the first mode under the same "
        "condition; 'to target' in training seconds, evaluated at epoch ends; 'update': "
        "the replicas' time in parameter updates, the servers' work under the parameter "
        "server)\n");
  }
  return 0;
}

}  // namespace

Command add_bench_sync_async_command(CLI::App& bench) {
  CLI::App* c = bench.add_subcommand("sync-async",
                                     "The update rules side by side, with and without a straggler");
  auto o = std::make_shared<SyncAsyncOptions>();
  c->add_option("--model", o->model, "A built-in image model (cnn, mlp)")->capture_default_str();
  c->add_option("--modes", o->modes, "Comma-separated: sync, backup, ssp1, ssp4, async, local8")
      ->capture_default_str();
  c->add_option("--epochs", o->epochs, "Epochs per run")->capture_default_str();
  c->add_option("--devices", o->devices, "Replicas (workers), at least 2")->capture_default_str();
  c->add_option("--slow-factor", o->slow_factor,
                "How much slower replica 1 is under the straggler condition (1: no such runs)")
      ->capture_default_str();
  c->add_option("--seeds", o->seeds, "Runs per mode and condition")->capture_default_str();
  c->add_option("--target", o->target, "Validation accuracy to time")->capture_default_str();
  c->add_option("--data-dir", o->data_dir, "Directory with the Fashion-MNIST IDX files")
      ->capture_default_str();
  c->add_option("--lr", o->learning_rate, "Learning rate of every run (default: tandem train's)");
  c->add_option("--train-examples", o->train_examples, "The first N training examples (0: all)");
  c->add_option("--test-examples", o->test_examples, "The first N test examples (0: all)");
  c->add_flag("--json", o->json, "Print the table as JSON");
  return {c, [o] { return run_bench_sync_async(*o); }};
}

}  // namespace tandem::cli
