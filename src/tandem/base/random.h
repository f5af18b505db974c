#pragma once
// Counter-based random numbers (Philox4x32-10, as in cuRAND, PyTorch and JAX).
// Element i of a draw depends only on (seed, offset + i), so results do not
// depend on how many threads fill a buffer: the basis of tandem's determinism.

#include <cstdint>

namespace tandem {

// A stream of random numbers identified by a seed; each fill consumes `count`
// positions of the stream. Not thread-safe: use one per thread or lock.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }

  // Fills out[0..count) with uniform floats in [low, high).
  void uniform(float* out, int64_t count, float low = 0.0f, float high = 1.0f);
  // Fills out[0..count) with normal floats (Box-Muller on pairs of uniforms).
  void normal(float* out, int64_t count, float mean = 0.0f, float stddev = 1.0f);
  // Fills out[0..count) with 32 random bits each.
  void bits(uint32_t* out, int64_t count);
  // One uniform integer in [0, bound), bound > 0.
  uint64_t next_below(uint64_t bound);

  // Reserves `count` positions and returns their first offset, for kernels that
  // draw in parallel with random_bits_at().
  uint64_t reserve(int64_t count);

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// 32 random bits at position `index` of the stream `seed` (pure function).
uint32_t random_bits_at(uint64_t seed, uint64_t index);

// Mixes several values into one well-spread 64-bit seed (e.g. seed, epoch).
uint64_t mix_seed(uint64_t a, uint64_t b);

// The calling thread's default generator, used by layers such as Dropout.
Generator& thread_generator();

}  // namespace tandem
