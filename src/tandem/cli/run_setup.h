#pragma once
// What `tandem train` and `tandem plan memory` share: the flags that define
// a run (model, data, batch and accumulation, strategy, precision,
// optimizer, ZeRO, recomputation, memory limit) and how they become the
// Trainer's configuration, the model factory and the data. `tandem plan
// memory` takes the flags of `tandem train`, so that a training command
// line is planned by changing its first word.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tandem/cli/run_data.h"
#include "tandem/data/augment.h"
#include "tandem/data/dataset.h"
#include "tandem/data/fashion_mnist.h"
#include "tandem/data/input_spec.h"
#include "tandem/precision/policy.h"
#include "tandem/train/model_factory.h"
#include "tandem/train/trainer.h"

namespace CLI {
class App;
}

namespace tandem::cli {

// The flags that define a run.
struct RunOptions {
  train::TrainConfig config;
  std::string model = "cnn";
  std::string model_options;  // a built-in's settings, "key=value,..."
  std::string precision = "float32";
  std::string compute_dtype;                // empty: the policy's
  std::string loss_scale;                   // empty: dynamic under mixed_float16, none otherwise
  std::optional<double> learning_rate;      // unset: optim::default_learning_rate(optimizer)
  std::optional<double> momentum;           // unset: OptimizerConfig's (sgd only)
  std::optional<double> weight_decay;       // unset: the optimizer's default
  std::optional<double> trust_coefficient;  // lars; unset: 0.001
  std::optional<double> warmup_epochs;      // unset: 0, or Goyal's under --lr-scaling
  std::string seed = "0";                   // parsed as uint64, so that -1 is refused
  std::optional<int> threads;               // unset: one per physical core (split between devices)
  std::string strategy =
      "one-device";  // --strategy, --optimizer and --schedule: parsed into config
  std::string optimizer = "sgd";
  std::string schedule = "cosine";
  std::optional<int> devices;  // unset: one per physical core
  std::string device = "cpu";  // --device: cpu or cuda
  bool allow_oversubscription = false;
  double collective_timeout = 300.0;        // seconds
  double peer_timeout = 15.0;               // seconds
  std::optional<double> bucket_mb;          // unset: 25, or 1 under --zero 2
  std::optional<int64_t> batch_size;        // unset: 128, or derived (--micro-batch-size)
  std::optional<int> accumulate;            // unset: 1, or derived
  std::optional<int64_t> micro_batch_size;  // unset: derived
  int zero = 0;
  // Update rules (distribute::EngineOptions): parameter-server shards
  // (unset: 1 under --strategy parameter-server), its staleness bound
  // (empty or "unbounded": none), backup workers and staleness-aware rate;
  // local SGD's period; a slowed replica ("R:FACTOR").
  std::optional<int> ps;
  std::string max_staleness;
  int backup_workers = 0;
  bool staleness_aware_lr = false;
  int sync_every = 0;
  bool average_optimizer_state = false;
  std::string slow_replica;
  bool recompute = false;
  std::string memory_limit;  // bytes per device (K/M/G suffixes); empty: the device's share of RAM
  std::string wire = "f32";
  std::string data_dir = data::default_fashion_mnist_dir();
  int64_t train_examples = 0;  // 0: all
  int64_t test_examples = 0;
  std::string data;             // a data specification (or image folder); empty: Fashion-MNIST
  std::string validation_data;  // likewise; empty: Fashion-MNIST's test set, or none
  std::string loss = "softmax_cross_entropy";
  std::optional<double> label_smoothing;  // softmax_cross_entropy; unset: 0
  std::optional<int32_t> ignore_index;
  std::optional<double> huber_delta;  // huber; unset: 1
  std::string metrics;                // empty: accuracy for classification, mae,rmse for regression
  std::string auto_shard = "auto";
  std::string prefetch = "0";        // batches, or "auto"
  std::string input_parallel = "1";  // batches built at once, or "auto"
  std::string augment = "none";      // data::parse_augment's spec
};

// A run's options turned into what trains it.
struct RunSetup {
  train::TrainConfig config;  // batch sizes still to resolve (the Trainer does)
  train::ModelFactory model;
  RunData data;
  precision::Policy policy = precision::Policy::float32;
  data::AugmentOptions augment;
  double load_seconds = 0.0;  // reading the data
};

// Registers the run's flags on a command (train, plan memory).
void add_run_options(CLI::App& command, RunOptions& o);

// Checks every flag and the configuration they make (InvalidArgument naming
// it; train::check_train_config), builds the model factory
// and loads the data. The configuration's output directory and resume are
// the caller's.
RunSetup prepare_run(RunOptions& o);

// The update-rule flags (--ps, --max-staleness, --backup-workers,
// --staleness-aware-lr, --sync-every, --average-optimizer-state,
// --slow-replica) into config, after config.strategy.kind is set; refuses a
// flag its strategy ignores. Ranges that depend on the replica count are
// distribute::check_engine_options's.
void configure_update_rule(const RunOptions& o, train::TrainConfig& config);

// --memory-limit in bytes, or the device's share of physical memory
// (distribute::StrategyLayout::host_replicas share it).
int64_t memory_limit_of(const RunOptions& o, int host_replicas);

// --seed (train's, generate's) as an unsigned 64-bit number: a negative one
// is refused instead of wrapping around. Throws InvalidArgument.
uint64_t parse_seed(const std::string& text);

}  // namespace tandem::cli
