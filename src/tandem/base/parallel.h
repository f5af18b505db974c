#pragma once
// Intra-op parallelism on the calling thread's OpenMP team. Each replica thread
// sets its own thread count (set_num_threads) so replicas never oversubscribe
// the cores; oneDNN uses the same OpenMP runtime and the same setting.

#include <cstdint>
#include <functional>

namespace tandem {

// Threads that parallel_for (and oneDNN) use on the calling thread.
int num_threads();
// Sets the calling thread's intra-op thread count (n >= 1).
void set_num_threads(int n);

// Sets the calling thread's count for a scope, restoring the previous one
// when it ends (also when an exception leaves it).
class NumThreadsScope {
 public:
  explicit NumThreadsScope(int n) : previous_(num_threads()) { set_num_threads(n); }
  ~NumThreadsScope() { set_num_threads(previous_); }
  NumThreadsScope(const NumThreadsScope&) = delete;
  NumThreadsScope& operator=(const NumThreadsScope&) = delete;

 private:
  int previous_;
};

// Calls body(begin, end) on disjoint ranges covering [0, n). The split is
// static: the same n, grain and thread count give the same ranges, so
// per-range partial results can be combined in a fixed order. Runs inline when
// n <= grain or one thread is configured. Exceptions from body are rethrown.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

// Number of ranges parallel_for would use for (n, grain) on this thread.
int parallel_chunks(int64_t n, int64_t grain);

}  // namespace tandem
