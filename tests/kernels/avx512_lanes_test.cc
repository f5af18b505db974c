// The AVX-512 kernels' bf16 stores against float_to_bf16, bit for bit: the
// integer rounding on any AVX-512 CPU and AVX512-BF16's conversion (with
// its subnormal lanes redone) where the CPU has it.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "support/reference.h"
#include "tandem/kernels/detail/avx512_lanes.h"

namespace tandem {
namespace {

using kernels::detail::Bf16;

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
  // Shuffled: subnormals, NaN and infinities share vectors with normal values.
  const std::vector<float> values = testing::shuffled(testing::bf16_rounding_cases(), 21);
  std::vector<Rounding> ways = {Rounding::integer, Rounding::dispatched_pairs,
                                Rounding::dispatched_masked};
  if (kernels::detail::has_avx512_bf16()) {
    ways.push_back(Rounding::native);
    ways.push_back(Rounding::native_pairs);
  }
  for (Rounding how : ways) {
    SCOPED_TRACE(::testing::Message() << "way " << static_cast<int>(how));
    std::vector<uint16_t> bits(values.size());
    round_all(values, bits, how);
    testing::expect_float_to_bf16_bits(values.data(), bits.data(), values.size() / 32 * 32);
  }
}

}  // namespace
}  // namespace tandem
