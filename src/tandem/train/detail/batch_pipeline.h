#pragma once
// Private: the Trainer's input when batches are built off the main thread.
// The batches of the rest of the run go through a data-layer pipeline,
// range(steps) -> map(make batch, parallel calls) -> prefetch(depth), so the
// Trainer's input gets tf.data's machinery: several batches assembled at
// once on the data pool, a buffer filled ahead on a background thread,
// autotuning of both, and per-stage counters. Batches are a pure function of
// (epoch, step), so this changes when they are built, never what they hold:
// losses are the same with any parallelism and depth.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/data/dataset.h"
#include "tandem/tensor/tensor.h"

namespace tandem::train::detail {

struct Batch {
  Tensor images, labels;     // this process's rows of the step's global batch
  int64_t global_count = 0;  // examples in the global batch
  int64_t first_row = 0;     // the global batch row this process's rows start at
};

class BatchPipeline {
 public:
  // Called concurrently when parallel_calls != 1; must be thread-safe.
  using MakeBatch = std::function<Batch(int64_t epoch, int64_t step)>;

  // Batches (epoch, step) from the given position to the end of the run.
  // parallel_calls: batches built at once (>= 1 or data::kAutotune);
  // prefetch_depth: batches kept ready (0: none, or data::kAutotune).
  BatchPipeline(MakeBatch make, int parallel_calls, int prefetch_depth, int64_t epoch, int64_t step,
                int64_t steps_per_epoch, int64_t epochs);

  // Returns once no call of `make` is running or can start: the map's pool
  // may still hold queued calls, and `make` usually refers to the caller's
  // locals.
  ~BatchPipeline();
  BatchPipeline(const BatchPipeline&) = delete;
  BatchPipeline& operator=(const BatchPipeline&) = delete;

  // The next batch, in order; rethrows what building it threw.
  Batch next();

  const data::Dataset& dataset() const { return dataset_; }

 private:
  // Stops the pipeline and waits until no call of `make` runs or can start.
  void close();

  struct Calls {
    std::mutex mutex;
    std::condition_variable idle;
    int running = 0;
    bool closed = false;  // calls that start after this do nothing
  };
  std::shared_ptr<Calls> calls_ = std::make_shared<Calls>();
  data::Dataset dataset_;
  data::Iterator iterator_;
};

}  // namespace tandem::train::detail
