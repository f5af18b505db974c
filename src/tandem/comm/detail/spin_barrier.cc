#include "tandem/comm/detail/spin_barrier.h"

#include <immintrin.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>

#include "tandem/base/error.h"

namespace tandem::comm::sync {
namespace {

using Clock = std::chrono::steady_clock;

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::microseconds limit) {
  timespec ts{static_cast<time_t>(limit.count() / 1000000),
              static_cast<long>((limit.count() % 1000000) * 1000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr,
          0);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

// True when counter `seen` has reached `target` (modulo 2^32).
bool reached(uint32_t seen, uint32_t target) {
  return static_cast<int32_t>(seen - target) >= 0;
}

}  // namespace

SpinBarrier::SpinBarrier(int size)
    : size_(size), arrivals_(new Arrival[static_cast<size_t>(size)]) {}

void SpinBarrier::abort() {
  aborted_.store(true, std::memory_order_seq_cst);
  for (int r = 0; r < size_; ++r) futex_wake_all(arrivals_[r].count);
}

bool SpinBarrier::arrive_and_wait(int rank, std::chrono::milliseconds timeout,
                                  const std::function<std::string()>& what) {
  if (aborted_.load(std::memory_order_acquire)) return false;
  Arrival& mine = arrivals_[rank];
  const uint32_t target = mine.count.load(std::memory_order_relaxed) + 1;
  // seq_cst pairs with the sleepers' increment-then-check: no lost wake-up.
  mine.count.store(target, std::memory_order_seq_cst);
  if (mine.sleepers.load(std::memory_order_seq_cst) > 0) futex_wake_all(mine.count);

  const auto start = Clock::now();
  const auto deadline = start + timeout;
  for (int r = 0; r < size_; ++r) {
    if (r == rank) continue;
    Arrival& peer = arrivals_[r];
    // 1. Spin: peers usually arrive within microseconds.
    bool arrived = false;
    for (uint32_t i = 0;; ++i) {
      if (reached(peer.count.load(std::memory_order_acquire), target)) {
        arrived = true;
        break;
      }
      _mm_pause();
      if ((i & 255) == 255 && Clock::now() - start > kSpinTime) break;
      if (aborted_.load(std::memory_order_relaxed)) return false;
    }
    // 2. Sleep on the peer's counter, in slices so the deadline is checked.
    while (!arrived) {
      peer.sleepers.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t seen = peer.count.load(std::memory_order_seq_cst);
      if (!reached(seen, target)) futex_wait(peer.count, seen, std::chrono::microseconds(100000));
      peer.sleepers.fetch_sub(1, std::memory_order_relaxed);
      if (reached(peer.count.load(std::memory_order_acquire), target)) break;
      if (aborted_.load(std::memory_order_acquire)) return false;
      if (Clock::now() > deadline) {
        std::string missing;
        for (int m = 0; m < size_; ++m) {
          if (!reached(arrivals_[m].count.load(std::memory_order_relaxed), target)) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(m);
          }
        }
        TANDEM_THROW(Timeout, what(), " on rank ", rank, " timed out after ", timeout.count(),
                     " ms waiting for rank(s) ", missing,
                     " (a rank that failed or skipped the call leaves its peers waiting)");
      }
    }
  }
  return true;
}

}  // namespace tandem::comm::sync
