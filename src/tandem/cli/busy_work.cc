#include "tandem/cli/busy_work.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

namespace tandem::cli {

double busy_work_per_second(int threads, const std::function<void()>& body) {
  std::atomic<bool> stop{false};
  const auto counters = std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(threads));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&stop, &counter = counters[static_cast<size_t>(t)], t] {
      float x = 1.0f + static_cast<float>(t);
      while (!stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 4096; ++i) x = x * 0.999f + 0.001f;  // a dependent chain
        counter.fetch_add(1, std::memory_order_relaxed);
      }
      asm volatile("" : : "x"(x));  // keep the arithmetic
    });
  }
  const auto total = [&] {
    uint64_t sum = 0;
    for (int t = 0; t < threads; ++t)
      sum += counters[static_cast<size_t>(t)].load(std::memory_order_relaxed);
    return sum;
  };
  const uint64_t before = total();
  const auto start = std::chrono::steady_clock::now();
  try {
    body();
  } catch (...) {
    stop = true;
    for (std::thread& w : workers) w.join();
    throw;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t work = total() - before;
  stop = true;
  for (std::thread& w : workers) w.join();
  return static_cast<double>(work) / std::max(seconds, 1e-9);
}

}  // namespace tandem::cli
