#pragma once
// Checks for the readers' promise that bad input is an error, never an
// allocation from an untrusted size: the code under test must throw quickly
// and raise the process's peak resident memory (VmHWM) by less than a bound.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

namespace tandem::testing {

// A field of /proc/self/status given in kB ("VmHWM:", "VmRSS:"), in bytes;
// -1 when it is missing.
inline int64_t proc_status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(field.size())) * 1024;
  }
  return -1;
}

// The rise of the peak RSS since construction. The peak is first lowered to
// the current RSS (writing 5 to /proc/self/clear_refs, Linux 4.0+), so that
// an earlier test's peak does not hide this one's; where that is refused,
// the rise is measured from the earlier peak (a weaker check, never a false
// failure).
class PeakRssProbe {
 public:
  PeakRssProbe() {
    std::ofstream("/proc/self/clear_refs") << "5";
    start_ = proc_status_bytes("VmHWM:");
  }
  int64_t rise_bytes() const { return proc_status_bytes("VmHWM:") - start_; }

 private:
  int64_t start_ = 0;
};

inline constexpr int64_t kMaxRejectionRssRise = int64_t{100} << 20;  // 100 MB
inline constexpr double kMaxRejectionSeconds = 1.0;

// Runs f, which must throw E; returns its message ("" when it did not throw).
// Fails the test when f took kMaxRejectionSeconds or more or raised the
// peak RSS by kMaxRejectionRssRise or more.
template <typename E, typename F>
std::string rejected_cheaply(F&& f) {
  const PeakRssProbe probe;
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    f();
    ADD_FAILURE() << "expected an error";
  } catch (const E& e) {
    message = e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
#ifndef TANDEM_SANITIZED  // shadow memory, quarantine and slow code: nothing to judge by
  EXPECT_LT(seconds, kMaxRejectionSeconds) << message;
  EXPECT_LT(probe.rise_bytes(), kMaxRejectionRssRise) << message;
#else
  (void)seconds;
#endif
  return message;
}

}  // namespace tandem::testing
