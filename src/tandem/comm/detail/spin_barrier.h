#pragma once
// Private: a barrier for the replica threads of one process. Waiters spin for
// a short while (a collective's peers usually arrive within microseconds),
// then sleep on a futex so that a slow peer's compute is not slowed by
// spinning; every wait has a deadline, and a timed-out wait names the ranks
// that had not arrived.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace tandem::comm::sync {

class SpinBarrier {
 public:
  explicit SpinBarrier(int size);

  // Waits until all `size` ranks have arrived. Throws Timeout naming the
  // missing ranks after `timeout`; `what` describes the call for the message.
  void arrive_and_wait(int rank, std::chrono::milliseconds timeout, const std::string& what);

  // How long waiters spin before sleeping.
  static constexpr std::chrono::microseconds kSpinTime{50};

 private:
  struct alignas(64) Arrival {
    std::atomic<uint64_t> count{0};
  };

  const int size_;
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> sleepers_{0};
  std::unique_ptr<Arrival[]> arrivals_;  // per rank, for timeout reports
};

}  // namespace tandem::comm::sync
