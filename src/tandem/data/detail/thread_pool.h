#pragma once
// Private: the data layer's worker threads, shared by all pipelines (parallel
// map calls run here). Tasks run in submission order on data_threads() threads.

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem::data::detail {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The task must not throw (catch and report through its own state).
  void submit(std::function<void()> task);
  int size() const { return static_cast<int>(threads_.size()); }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// The process-wide pool (created on first use).
ThreadPool& data_pool();

// Whether the calling thread is one of a pool's workers, or a pipeline
// thread started (directly or not) from one: a map function running there
// that iterates a parallel map of its own must not wait for pool tasks
// queued behind it (with every worker doing so, none would run).
bool on_pool_thread();
// For the threads a pipeline starts (prefetch producer, map runner): called
// first thing in the new thread with on_pool_thread() of the thread that
// started it.
void inherit_pool_thread(bool started_from_pool);

}  // namespace tandem::data::detail
