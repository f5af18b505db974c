#pragma once
// Private: assembles the training batches of the coming steps on a
// background thread, `depth` ahead of the step that consumes them (tf.data's
// prefetch for the Trainer's own input). Batches are a pure function of
// (epoch, step), so prefetching changes when they are built, never what
// they hold: losses are the same with any depth.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "tandem/tensor/tensor.h"

namespace tandem::train::detail {

struct Batch {
  Tensor images, labels;     // this process's rows of the step's global batch
  int64_t global_count = 0;  // examples in the global batch
  int64_t first_row = 0;     // the global batch row this process's rows start at
};

class BatchPrefetcher {
 public:
  using MakeBatch = std::function<Batch(int64_t epoch, int64_t step)>;

  // Produces (epoch, step) from the given position to the end of the run.
  BatchPrefetcher(MakeBatch make, int depth, int64_t epoch, int64_t step, int64_t steps_per_epoch,
                  int64_t epochs)
      : make_(std::move(make)), depth_(depth) {
    producer_ = std::thread([this, epoch, step, steps_per_epoch, epochs] {
      run(epoch, step, steps_per_epoch, epochs);
    });
  }
  ~BatchPrefetcher() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    producer_.join();
  }
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // The next batch, in order; rethrows what building it threw.
  Batch next() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !ready_.empty() || error_ || finished_; });
    if (ready_.empty()) {
      if (error_) std::rethrow_exception(error_);
      throw std::logic_error("BatchPrefetcher: no batch left");
    }
    Batch b = std::move(ready_.front());
    ready_.pop_front();
    changed_.notify_all();
    return b;
  }

 private:
  void run(int64_t epoch, int64_t step, int64_t steps_per_epoch, int64_t epochs);

  MakeBatch make_;
  int depth_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> ready_;
  std::exception_ptr error_;
  bool stopping_ = false, finished_ = false;
  std::thread producer_;
};

inline void BatchPrefetcher::run(int64_t epoch, int64_t step, int64_t steps_per_epoch,
                                 int64_t epochs) {
  for (; epoch < epochs; ++epoch, step = 0) {
    for (; step < steps_per_epoch; ++step) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stopping_ || static_cast<int>(ready_.size()) < depth_; });
        if (stopping_) return;
      }
      try {
        Batch b = make_(epoch, step);
        std::lock_guard<std::mutex> lock(mutex_);
        ready_.push_back(std::move(b));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        error_ = std::current_exception();
        changed_.notify_all();
        return;
      }
      changed_.notify_all();
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  finished_ = true;
  changed_.notify_all();
}

}  // namespace tandem::train::detail
