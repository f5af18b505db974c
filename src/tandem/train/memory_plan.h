#pragma once
// The memory planner: each device's peak, by allocator category, predicted
// before the first step for a model, batch, precision, strategy, ZeRO
// stage, accumulation and recomputation (docs/memory.md).
//  - parameters, gradients, optimizer state and communication buffers come
//    from the layouts the engine will use (the Reducer's buckets, ZeRO's
//    padding and shards, the staging buffers), computed, not measured;
//  - activations and workspace come from tracing one replica's forward and
//    backward (and an evaluation forward) at two small batches on a scratch
//    device, fitted as fixed + per-row bytes and scaled to the real
//    micro-batch; the fixed part includes what persists between steps, and
//    the trace adds what the parameters' category gains (mixed precision's
//    cached low-precision weights, two of them while an update recasts);
//  - under ZeRO a checkpoint is gathered piece by piece, and the chief's
//    first device holds one bucket's optimizer slot at a time (it is
//    written to the file before the next is gathered);
//  - input is the in-memory data this process holds plus the batches the
//    input pipeline keeps (two, plus the prefetch depth) on device 0, and
//    each replica's share of the input feature on its own device.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/data/element.h"
#include "tandem/distribute/strategy.h"
#include "tandem/tensor/allocator.h"
#include "tandem/train/model_factory.h"
#include "tandem/train/trainer.h"

namespace tandem::train {

struct MemoryPlanInput {
  ModelFactory model;  // as the run builds it (recomputation included)
  // The run's configuration with its batch sizes resolved
  // (resolve_batch_sizes): optimizer, reducer (ZeRO), accumulation, loss,
  // input feature, prefetch, evaluation batch.
  TrainConfig config;
  distribute::StrategyLayout layout;
  // One training example: the shapes and dtypes of a batch's rows.
  data::Element example;
  bool evaluates = true;             // validation batches run between epochs
  int64_t validation_examples = -1;  // -1: not known (evaluation batches are then full)
  int64_t resident_input_bytes = 0;  // in-memory datasets this process holds
  // The run writes checkpoints: under ZeRO every replica takes part in
  // gathering the optimizer state, and the chief's first hands it to the
  // file one bucket's slot at a time.
  bool writes_checkpoints = false;
  bool chief = true;  // this process is the chief
};

// One device's prediction. Each category's own peak is
// max(floor, fixed + per_row x rows), rows being the micro-batch (rows per
// replica per micro-batch) and floor what evaluation needs. The device's
// peak is not their sum (they peak at different moments): it is what stays
// allocated through a step (steady) plus the step's own allocations at
// their simultaneous peak (transient: a training micro-batch, or at least
// an evaluation batch or a checkpoint's gathering).
struct DeviceMemoryPlan {
  Device device;
  std::array<double, kMemoryCategoryCount> fixed{};
  std::array<double, kMemoryCategoryCount> per_row{};
  std::array<double, kMemoryCategoryCount> floor{};
  double steady_fixed = 0.0, steady_per_row = 0.0;
  double transient_fixed = 0.0, transient_per_row = 0.0, transient_floor = 0.0;

  int64_t bytes(MemoryCategory category, int64_t micro_batch) const;
  // The device's predicted peak.
  int64_t total(int64_t micro_batch) const;
  // The category with the most bytes at this micro-batch.
  MemoryCategory largest(int64_t micro_batch) const;
};

struct MemoryPlan {
  int64_t micro_batch = 0;  // the run's
  int accumulation_steps = 1;
  int global_replicas = 1;
  int64_t parameter_count = 0;
  std::vector<DeviceMemoryPlan> devices;  // this process's replicas' devices, in order
  // How the activation trace went: the rows traced and the seconds it took.
  std::array<int64_t, 2> traced_rows{};
  double trace_seconds = 0.0;

  // The device with the largest predicted peak at a micro-batch of `rows`.
  const DeviceMemoryPlan& fullest(int64_t rows) const;
  int64_t peak(int64_t rows) const { return fullest(rows).total(rows); }
  // The largest micro-batch whose every device stays within limit_bytes; 0
  // when not even one row fits.
  int64_t largest_micro_batch(int64_t limit_bytes) const;
};

// Builds one replica's model on a scratch device, traces it, and adds up the
// rest. Throws what building the model or its forward throws (a bad example
// for the model is the same error training would give).
MemoryPlan plan_memory(const MemoryPlanInput& input);

// Refuses a run predicted not to fit: InvalidArgument naming the device, its
// predicted peak against limit_bytes, its largest category, and the largest
// global batch that would fit (or that one row per replica does not).
void check_memory_limit(const MemoryPlan& plan, int64_t limit_bytes);

// The default per-device limit: this machine's physical memory divided
// between the replicas that train on it (every process's here).
int64_t default_memory_limit(int host_replicas);

}  // namespace tandem::train
