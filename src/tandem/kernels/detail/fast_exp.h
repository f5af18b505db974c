#pragma once
// exp(x) in float arithmetic that compilers vectorise (libm's expf is a
// call per element): Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, a
// degree-6 polynomial for e^r (Cephes' expf coefficients) and 2^n put into
// the exponent bits. Within 2 ulp of expf over the normal range; below
// about -87.3 the result is 0 (expf returns subnormals there), above about
// 88.4 it is infinity, and NaN stays NaN, so that overflow checks
// downstream still see what expf would give them.

#include <bit>
#include <cstdint>
#include <limits>

namespace tandem::kernels::detail {

[[gnu::always_inline]] inline float fast_exp(float x) {
  constexpr float kHigh = 88.3762626647949f;  // n stays <= 127
  constexpr float kLow = -87.3365478515625f;  // n stays >= -126: a normal 2^n
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f;  // ln 2 = kLn2High + kLn2Low, the first exact in float
  constexpr float kLn2Low = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  // NaN fails both tests and takes kLow: converting NaN to an integer
  // below would be undefined (the result for NaN is x itself, at the end).
  const float c = x > kHigh ? kHigh : (x >= kLow ? x : kLow);
  const float n = (c * kLog2e + kRound) - kRound;
  const float r = (c - n * kLn2High) - n * kLn2Low;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const auto exponent = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  const float y = p * std::bit_cast<float>(exponent);
  if (x != x) return x;
  if (x > kHigh) return std::numeric_limits<float>::infinity();
  return x < kLow ? 0.0f : y;
}

}  // namespace tandem::kernels::detail
