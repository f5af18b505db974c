#pragma once
// Private: a barrier for the replica threads of one process. Each rank
// publishes an arrival counter on its own cache line and waits for every
// other rank's counter to catch up: with two ranks that is one cache-line
// transfer each way, in parallel, instead of the three serial transfers of a
// shared counter. Waiters spin for a short while (a collective's peers usually
// arrive within microseconds), then sleep on the futex of the rank they wait
// for, so that a slow peer's compute is not slowed by spinning. Every wait has
// a deadline; a timed-out wait names the ranks that had not arrived.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace tandem::comm::sync {

class SpinBarrier {
 public:
  explicit SpinBarrier(int size);

  // Waits until all `size` ranks have arrived as often as this one: true;
  // false once abort() was called (now or before). Throws Timeout naming the
  // missing ranks after `timeout`; `what` describes the call for the message
  // (only called then). One thread per rank at a time.
  [[nodiscard]] bool arrive_and_wait(int rank, std::chrono::milliseconds timeout,
                                     const std::function<std::string()>& what);
  // Every waiter, now and later, returns false promptly.
  void abort();

  // How long waiters spin before sleeping.
  static constexpr std::chrono::microseconds kSpinTime{50};

 private:
  struct alignas(64) Arrival {
    std::atomic<uint32_t> count{0};  // arrivals, modulo 2^32; also the futex word
    std::atomic<int> sleepers{0};    // threads sleeping on `count`
  };

  const int size_;
  std::unique_ptr<Arrival[]> arrivals_;
  std::atomic<bool> aborted_{false};
};

}  // namespace tandem::comm::sync
