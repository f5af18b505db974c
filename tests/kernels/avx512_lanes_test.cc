// The AVX-512 kernels' bf16 stores against float_to_bf16, bit for bit: the
// integer rounding on any AVX-512 CPU and AVX512-BF16's conversion (with
// its subnormal lanes redone) where the CPU has it.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <vector>

#include "tandem/base/random.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/tensor/convert.h"

namespace tandem {
namespace {

using kernels::detail::Bf16;

// Upper halves of every kind (all 65,536) with lower halves at the
// rounding boundaries and a random one, shuffled so that subnormals, NaN
// and infinities share vectors with normal values.
std::vector<float> rounding_cases() {
  Generator g(21);
  std::vector<float> values;
  for (uint32_t high = 0; high <= 0xFFFF; ++high) {
    for (uint32_t low :
         {0x0000u, 0x7FFFu, 0x8000u, 0x8001u, static_cast<uint32_t>(g.next_below(0x10000))}) {
      values.push_back(std::bit_cast<float>((high << 16) | low));
    }
  }
  for (size_t i = values.size() - 1; i > 0; --i) std::swap(values[i], values[g.next_below(i + 1)]);
  return values;
}

// integer and native: 16 values a call (native_pairs 32); the dispatched
// stores as the kernels call them (native where the CPU has AVX512-BF16).
enum class Rounding { integer, native, native_pairs, dispatched_pairs, dispatched_masked };

TANDEM_AVX512 void round_all(const std::vector<float>& in, std::vector<uint16_t>& out,
                             Rounding how) {
  auto* bf16 = reinterpret_cast<Bf16*>(out.data());
  for (size_t i = 0; i + 32 <= in.size(); i += 32) {
    const __m512 lo = _mm512_loadu_ps(in.data() + i), hi = _mm512_loadu_ps(in.data() + i + 16);
    auto* p = reinterpret_cast<__m256i*>(out.data() + i);
    switch (how) {
      case Rounding::integer:
        _mm256_storeu_si256(p, kernels::detail::bf16_bits_integer(lo));
        _mm256_storeu_si256(p + 1, kernels::detail::bf16_bits_integer(hi));
        break;
      case Rounding::native:
        _mm256_storeu_si256(p, kernels::detail::bf16_bits_native(lo));
        _mm256_storeu_si256(p + 1, kernels::detail::bf16_bits_native(hi));
        break;
      case Rounding::native_pairs:
        _mm512_storeu_si512(p, kernels::detail::bf16_bits_native(lo, hi));
        break;
      case Rounding::dispatched_pairs:
        kernels::detail::store32(bf16 + i, lo, hi);
        break;
      case Rounding::dispatched_masked:
        kernels::detail::store16_masked(bf16 + i, lo, 0x00FF);
        kernels::detail::store16_masked(bf16 + i, lo, 0xFF00);
        kernels::detail::store16(bf16 + i + 16, hi);
        break;
    }
  }
}

TEST(Avx512Lanes, Bf16StoresGiveFloatToBf16sBits) {
  if (!kernels::detail::has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  const std::vector<float> values = rounding_cases();
  std::vector<Rounding> ways = {Rounding::integer, Rounding::dispatched_pairs,
                                Rounding::dispatched_masked};
  if (kernels::detail::has_avx512_bf16()) {
    ways.push_back(Rounding::native);
    ways.push_back(Rounding::native_pairs);
  }
  for (Rounding how : ways) {
    std::vector<uint16_t> bits(values.size());
    round_all(values, bits, how);
    for (size_t i = 0; i < values.size() / 32 * 32; ++i) {
      ASSERT_EQ(bits[i], float_to_bf16(values[i]))
          << "way " << static_cast<int>(how) << ", bits 0x" << std::hex
          << std::bit_cast<uint32_t>(values[i]);
    }
  }
}

}  // namespace
}  // namespace tandem
