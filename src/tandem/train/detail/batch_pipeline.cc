#include "tandem/train/detail/batch_pipeline.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/trace.h"

namespace tandem::train::detail {
namespace {

// A batch travels through the pipeline as an element; its two counts ride
// along as a 2-element i32 tensor.
data::Element to_element(Batch b) {
  const int32_t counts[2] = {static_cast<int32_t>(b.global_count),
                             static_cast<int32_t>(b.first_row)};
  return {{"image", std::move(b.images)},
          {"label", std::move(b.labels)},
          {"counts", Tensor::from_ints(Shape{2}, counts)}};
}

Batch from_element(const data::Element& e) {
  const auto* counts = static_cast<const int32_t*>(e.at("counts").raw_data());
  return {e.at("image"), e.at("label"), counts[0], counts[1]};
}

}  // namespace

BatchPipeline::BatchPipeline(MakeBatch make, int parallel_calls, int prefetch_depth, int64_t epoch,
                             int64_t step, int64_t steps_per_epoch, int64_t epochs)
    : dataset_(data::Dataset::range(0)) {
  const int64_t first = epoch * steps_per_epoch + step;
  const int64_t remaining = epochs * steps_per_epoch - first;
  // range() counts in i32.
  if (remaining > INT32_MAX)
    TANDEM_THROW(InvalidArgument, "the run has ", remaining,
                 " steps left; the input pipeline counts at most ", INT32_MAX);
  auto build = [make = std::move(make), calls = calls_, first,
                steps_per_epoch](data::Element e) -> data::Element {
    {
      std::lock_guard<std::mutex> lock(calls->mutex);
      if (calls->closed) return {};  // queued on the pool when the pipeline went away
      ++calls->running;
    }
    struct Finished {
      Calls& calls;
      ~Finished() {
        std::lock_guard<std::mutex> lock(calls.mutex);
        if (--calls.running == 0) calls.idle.notify_all();
      }
    } finished{*calls};
    // One OpenMP thread: a team here would spin on the replicas' cores.
    NumThreadsScope one_thread(1);
    thread_local bool named = false;
    if (!named) {
      trace::set_thread_name("input (data thread)");
      named = true;
    }
    const int64_t global = first + *static_cast<const int32_t*>(e.at("index").raw_data());
    return to_element(make(global / steps_per_epoch, global % steps_per_epoch));
  };
  dataset_ = data::Dataset::range(std::max<int64_t>(remaining, 0))
                 .map(std::move(build), {.num_parallel_calls = parallel_calls});
  if (prefetch_depth != 0) dataset_ = dataset_.prefetch(prefetch_depth);
  try {
    iterator_ = dataset_.iterator();
  } catch (...) {
    // A stage that failed to start may leave calls queued: no destructor runs.
    close();
    throw;
  }
}

BatchPipeline::~BatchPipeline() { close(); }

void BatchPipeline::close() {
  std::unique_lock<std::mutex> lock(calls_->mutex);
  calls_->closed = true;
  lock.unlock();
  iterator_ = data::Iterator();  // stops the map's runner and the prefetch thread
  lock.lock();
  calls_->idle.wait(lock, [&] { return calls_->running == 0; });
}

Batch BatchPipeline::next() {
  std::optional<data::Element> e = iterator_.next();
  if (!e) TANDEM_THROW(Error, "the input pipeline ended before the run did");
  return from_element(*e);
}

}  // namespace tandem::train::detail
