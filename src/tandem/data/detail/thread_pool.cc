#include "tandem/data/detail/thread_pool.h"

#include "tandem/base/parallel.h"
#include "tandem/data/detail/node.h"

namespace tandem::data::detail {
namespace {
thread_local bool in_pool_context = false;
}  // namespace

bool on_pool_thread() {
  return in_pool_context;
}

void inherit_pool_thread(bool started_from_pool) {
  in_pool_context = started_from_pool;
}

ThreadPool::ThreadPool(int threads) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      // Map functions may call kernels; keep them single-threaded so that the
      // pipeline's parallelism is the pool's and does not oversubscribe.
      set_num_threads(1);
      in_pool_context = true;
      std::unique_lock<std::mutex> lock(mutex_);
      for (;;) {
        cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        std::function<void()> task = std::move(tasks_.front());
        tasks_.pop_front();
        lock.unlock();
        task();
        lock.lock();
      }
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

ThreadPool& data_pool() {
  // Never destroyed: iterators may be destroyed after main() returns.
  static ThreadPool* pool = new ThreadPool(data_threads());
  return *pool;
}

}  // namespace tandem::data::detail
