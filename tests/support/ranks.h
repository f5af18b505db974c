#pragma once
// Runs one function per rank on its own thread, as replica threads do, and
// rethrows the first exception on the caller's thread (so a failing rank is a
// test failure, not a crash or a hang).

#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem::testing {

inline void run_ranks(int ranks, const std::function<void(int rank)>& body) {
  std::vector<std::thread> threads;
  std::exception_ptr first;
  std::mutex mutex;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace tandem::testing
