#pragma once
// TrainConfig: what a Trainer (train/trainer.h) is asked to do, and the
// checks and derivations that need no data or replicas: the settings that
// cannot work named as TrainConfig fields and `tandem train` flags, and the
// batch-size contract (global = micro-batch x accumulation steps x replicas).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/data/dataset.h"
#include "tandem/data/distribute.h"
#include "tandem/distribute/engine.h"
#include "tandem/distribute/strategy.h"
#include "tandem/optim/lr_schedule.h"
#include "tandem/optim/optimizer.h"
#include "tandem/precision/loss_scaler.h"
#include "tandem/precision/policy.h"
#include "tandem/train/loss.h"
#include "tandem/train/metric.h"

namespace tandem::train {

struct TrainConfig {
  int64_t epochs = 5;
  // N > 0: fit() returns after epoch N of the epochs-long run (its
  // checkpoint saved, TrainResult::paused), and a resume continues to
  // `epochs` with the same schedule: how a search trains a trial in rungs.
  // In [0, epochs].
  int64_t stop_after_epochs = 0;
  // N > 0: a checkpoint every N steps as well as at each epoch's end (with
  // output_dir), so that a killed run loses at most N steps of a long epoch.
  int64_t checkpoint_every = 0;
  // The global batch is micro_batch_size x engine.accumulation_steps x
  // replicas (DeepSpeed's contract): each replica's share runs in
  // accumulation_steps micro-batches whose gradients make one update
  // (gradient accumulation, distribute::EngineOptions). Any two determine
  // the third: 0 marks the one to derive (micro_batch_size 0: batch_size /
  // (replicas x accumulation_steps), accumulation_steps 0: batch_size /
  // (replicas x micro_batch_size)); the Trainer resolves them once it knows
  // the replica count and refuses values that do not divide or disagree.
  int64_t batch_size = 128;        // global
  int64_t micro_batch_size = 0;    // per replica
  int64_t eval_batch_size = 1000;  // global
  // true: the last partial global batch of each epoch is not trained (with
  // several processes, the job's, not each process's); false: it is.
  bool drop_remainder = false;
  // 0: an epoch is one pass over the training data; N: N steps per epoch
  // from one pass that continues across epochs (needed for infinite data).
  int64_t steps_per_epoch = 0;
  // With steps_per_epoch: when the pass over the data ends (every
  // process's: one whose shard ended first trains on empty batches until
  // then), the next pass (Dataset::iterator(k + 1): its own shuffle)
  // follows, so the run has steps_per_epoch x epochs steps whatever the
  // data's size. Without it the run ends when the data does.
  bool repeat = false;
  // The step engine's settings, handed to it as they are: the optimizer,
  // gradient synchronisation (reducer, ZeRO: reducer.zero_stage),
  // accumulation_steps, loss_scale (unset: dynamic for a mixed_float16
  // model, none otherwise; with a scaler, steps with non-finite gradients
  // are skipped instead of failing), seed (the dropout streams, and also
  // the data's shuffles and batch_transform's generator), local SGD
  // (sync_every > 0: replicas step on their own rows and average their
  // parameters every this many steps and at each epoch's end, with the
  // optimizer state when average_optimizer_state), the parameter_server
  // strategy's shards, staleness bound and backup workers, and a replica
  // made slower on purpose (--slow-replica R:FACTOR).
  distribute::EngineOptions engine;
  // Cosine decay from the learning rate to min_lr over the run: the recipe
  // fixes the rate, not its schedule, and decay converges further (see
  // docs/performance.md for both). Schedules measured in epochs need the
  // steps per epoch: from steps_per_epoch or the data's cardinality.
  // A resume with other epochs than the run started with stretches (or
  // shrinks) the cosine decay over the new total (see ResumePoint::epochs).
  optim::ScheduleKind schedule = optim::ScheduleKind::cosine;
  double lr_step_epochs = 1.0;  // step schedule period, in epochs; > 0
  double lr_gamma = 0.1;        // step schedule factor; in (0, 1]
  double min_lr = 0.0;          // cosine floor; in [0, engine.optimizer.learning_rate]
  double warmup_epochs = 0.0;   // in [0, epochs]
  // Learning-rate scaling with the global batch (optim::scaled_learning_rate):
  // engine.optimizer.learning_rate is the rate tuned at reference_batch; the run
  // uses it scaled "linear"ly or by "sqrt" to the resolved global batch
  // (config() then holds the scaled rate). "none": as given.
  std::string lr_scaling = "none";
  int64_t reference_batch = 0;  // > 0 with a rule
  // Measure the gradient noise scale (train/noise_scale.h) every this many
  // steps: two passes over the gradients and a small exchange on those
  // steps. 0: never. It needs two batch sizes: several replicas, or
  // engine.accumulation_steps > 1 on one.
  int64_t noise_scale_every = 1;
  distribute::StrategyConfig strategy;  // one_device by default

  // What the model computes from and against.
  std::string input_feature = "image";  // the batch feature given to forward()
  // A classifier of an image folder: label i's class name (its sub-folder),
  // kept in the checkpoint and summary.json so that validation, evaluation
  // and resumed runs map other folders by name. Empty for other data.
  std::vector<std::string> class_names;
  // The command line that started the run ("--name=value" each; tandem
  // train's), kept in the checkpoint and summary.json: a resume takes its
  // settings from it. Empty for runs made in code.
  std::vector<std::string> arguments;
  Loss loss = make_loss("softmax_cross_entropy");
  std::vector<Metric> metrics = {make_metric("accuracy")};

  // Input.
  data::AutoShardPolicy auto_shard = data::AutoShardPolicy::automatic;
  // Set for examples with variable-length features: batches are padded to
  // their longest example (data::Dataset::padded_batch; drop_remainder is
  // taken from above).
  std::optional<data::PaddedBatchOptions> padding;
  // Applied to each batch this process assembles, before it is split
  // between its replicas (augmentation, decoding): part of the step's input
  // time. Must keep the number of rows. thread_generator() is seeded from
  // (seed, process, epoch, step) before each call, so random augmentation is
  // reproducible whichever thread runs it. Runs on the main thread, or
  // (prefetch or parallel input) on the data layer's threads while replicas
  // compute: it must not touch the model.
  data::MapFn batch_transform;
  // Batches assembled ahead of the step that trains on them, on a background
  // thread (tf.data's prefetch); 0: each batch is assembled when its step
  // starts; data::kAutotune: the buffer grows while the step finds it empty.
  int prefetch_batches = 0;
  // batch_transform calls at once on the data layer's pool (num_parallel_calls
  // of the map that runs it), or data::kAutotune.
  int input_parallel_calls = 1;

  // Where checkpoints go (empty: no checkpoints): RunDirectory::checkpoint().
  std::string output_dir;
  // Continue the run whose checkpoint is in output_dir (which must hold one).
  bool resume = false;
  // Elastic training (multi_worker under tandem launch --elastic): the
  // in-memory copy of the training state that a lost member rolls the
  // others back to, every this many steps (and at each epoch's start).
  int64_t elastic_copy_every = 50;
};

// InvalidArgument naming the first setting of config that cannot work
// (epochs, step counts, pipeline depths, optimizer, learning-rate scaling,
// loss, metrics), checked without data or replicas; the Trainer calls it first.
void check_train_config(const TrainConfig& config);

// InvalidArgument for schedule settings that cannot work (a step period or factor out of range,
// min_lr above the rate, warmup longer than the run), against config.optimizer.learning_rate: the
// Trainer calls it once the rate is scaled to the resolved batch.
void check_schedule_settings(const TrainConfig& config);

// The engine settings a configuration asks for, for a model built under
// `policy`: loss scaling as configured, or dynamic for mixed_float16 when
// unset. The Trainer's engine and a custom loop's (the Python package's
// strategy.engine) are made from it alike.
distribute::EngineOptions engine_options_of(const TrainConfig& config, precision::Policy policy);

// Derives the unset one of batch_size, accumulation_steps and
// micro_batch_size (see TrainConfig) for `replicas` replicas and checks that
// they agree: InvalidArgument naming the numbers otherwise. The Trainer
// calls it once it knows its strategy's replica count.
void resolve_batch_sizes(TrainConfig& config, int replicas);
// resolve_batch_sizes' last part, for a replica count that changed (an
// elastic job's new membership): the global batch divides among `replicas`
// and each share into accumulation_steps equal micro-batches, whose size
// becomes micro_batch_size; InvalidArgument naming the numbers otherwise.
void split_global_batch(TrainConfig& config, int replicas);

// InvalidArgument when the training data has no examples, or, with
// drop_remainder, fewer than one global batch (config's, resolved): no step
// would run. Without drop_remainder a smaller set is one partial batch per
// epoch, as Keras takes it. fit() checks it too.
void check_batch_fits(const TrainConfig& config, const data::Dataset& train);

}  // namespace tandem::train
