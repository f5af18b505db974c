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

}  // namespace

SpinBarrier::SpinBarrier(int size)
    : size_(size), arrivals_(new Arrival[static_cast<size_t>(size)]) {}

void SpinBarrier::arrive_and_wait(int rank, std::chrono::milliseconds timeout,
                                  const std::string& what) {
  const uint32_t generation = generation_.load(std::memory_order_acquire);
  const uint64_t my_arrivals = arrivals_[rank].count.fetch_add(1, std::memory_order_relaxed) + 1;
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) == size_ - 1) {
    arrived_.store(0, std::memory_order_relaxed);
    // seq_cst pairs with the sleepers' increment-then-check: no lost wake-up.
    generation_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(generation_);
    return;
  }
  const auto start = Clock::now();
  // 1. Spin: peers usually arrive within microseconds.
  for (uint32_t i = 0;; ++i) {
    if (generation_.load(std::memory_order_acquire) != generation) return;
    _mm_pause();
    if ((i & 255) == 255 && Clock::now() - start > kSpinTime) break;
  }
  // 2. Sleep on the futex, in slices so the deadline is checked.
  const auto deadline = start + timeout;
  for (;;) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    if (generation_.load(std::memory_order_seq_cst) == generation) {
      futex_wait(generation_, generation, std::chrono::microseconds(100000));
    }
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    if (generation_.load(std::memory_order_acquire) != generation) return;
    if (Clock::now() > deadline) {
      std::string missing;
      for (int r = 0; r < size_; ++r) {
        if (arrivals_[r].count.load(std::memory_order_relaxed) < my_arrivals) {
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
      }
      TANDEM_THROW(Timeout, what, " on rank ", rank, " timed out after ", timeout.count(),
                   " ms waiting for rank(s) ", missing.empty() ? "?" : missing,
                   " (a rank that failed or skipped the call leaves its peers waiting)");
    }
  }
}

}  // namespace tandem::comm::sync
