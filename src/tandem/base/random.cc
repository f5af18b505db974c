#include "tandem/base/random.h"

#include <cmath>
#include <numbers>

namespace tandem {
namespace {

struct Block {
  uint32_t v[4];
};

// Philox4x32 with 10 rounds (Salmon et al., SC'11).
Block philox(uint64_t counter, uint64_t key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

float to_unit_float(uint32_t bits) {
  // 24 high bits: exactly representable, strictly below 1.
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

}  // namespace

uint32_t random_bits_at(uint64_t seed, uint64_t index) {
  return philox(index >> 2, seed).v[index & 3];
}

uint64_t mix_seed(uint64_t a, uint64_t b) {
  // splitmix64 finaliser over a combination of both values.
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Generator::reserve(int64_t count) {
  const uint64_t first = offset_;
  offset_ += static_cast<uint64_t>(count);
  return first;
}

void Generator::bits(uint32_t* out, int64_t count) {
  const uint64_t first = reserve(count);
  for (int64_t i = 0; i < count; ++i) out[i] = random_bits_at(seed_, first + i);
}

void Generator::uniform(float* out, int64_t count, float low, float high) {
  const uint64_t first = reserve(count);
  const float span = high - low;
  for (int64_t i = 0; i < count; ++i) {
    out[i] = low + span * to_unit_float(random_bits_at(seed_, first + i));
  }
}

void Generator::normal(float* out, int64_t count, float mean, float stddev) {
  const int64_t pairs = (count + 1) / 2;
  const uint64_t first = reserve(2 * pairs);
  for (int64_t p = 0; p < pairs; ++p) {
    // 1 - u keeps the logarithm's argument in (0, 1].
    const double u1 = 1.0 - to_unit_float(random_bits_at(seed_, first + 2 * p));
    const double u2 = to_unit_float(random_bits_at(seed_, first + 2 * p + 1));
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * std::numbers::pi * u2;
    out[2 * p] = static_cast<float>(mean + stddev * radius * std::cos(angle));
    if (2 * p + 1 < count) {
      out[2 * p + 1] = static_cast<float>(mean + stddev * radius * std::sin(angle));
    }
  }
}

uint64_t Generator::next_below(uint64_t bound) {
  // 64 random bits from two draws; modulo bias is below 2^-32 for bounds < 2^32.
  const uint64_t first = reserve(2);
  const uint64_t value = (static_cast<uint64_t>(random_bits_at(seed_, first)) << 32) |
                         random_bits_at(seed_, first + 1);
  return value % bound;
}

Generator& thread_generator() {
  thread_local Generator generator(0);
  return generator;
}

}  // namespace tandem
