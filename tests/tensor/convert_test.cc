#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "support/reference.h"
#include "tandem/base/random.h"
#include "tandem/tensor/convert.h"
#include "tandem/tensor/detail/bf16_casts.h"

namespace tandem {
namespace {

using testing::bf16_rounding_cases;
using testing::expect_float_to_bf16_bits;
using testing::shuffled;

// Reference bf16 rounding in double arithmetic: nearest representable value
// with 8 significant bits, ties to even.
float bf16_reference(float x) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0f) return x;
  int exponent;
  std::frexp(static_cast<double>(x), &exponent);  // |x| in [2^(e-1), 2^e)
  // 8 significant bits; below the normal range the spacing stays 2^-133.
  const int quantum = std::max(exponent - 8, -133);
  const double rounded =
      std::nearbyint(std::ldexp(static_cast<double>(x), -quantum));  // ties to even
  return static_cast<float>(std::ldexp(rounded, quantum));
}

std::vector<float> interesting_floats() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          1e-8f,
                          6.1035156e-05f,
                          5.9604645e-08f,
                          2.9802322e-08f,
                          1.0009765625f,
                          1.00390625f,
                          1.01171875f,
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  Generator g(11);
  std::vector<uint32_t> bits(200000);
  g.bits(bits.data(), static_cast<int64_t>(bits.size()));
  for (uint32_t b : bits) {
    const float f = std::bit_cast<float>(b);
    if (!std::isnan(f)) v.push_back(f);
  }
  // Exact ties for bf16 and f16 rounding.
  for (uint32_t m = 0; m < 64; ++m) {
    v.push_back(std::bit_cast<float>(0x3F800000u | (m << 16) | 0x8000u));
    v.push_back(std::bit_cast<float>(0x3F800000u | (m << 13) | 0x1000u));
  }
  return v;
}

TEST(Convert, Bf16RoundsToNearestEven) {
  for (float x : interesting_floats()) {
    const float expected = bf16_reference(x);
    const float actual = bf16_to_float(float_to_bf16(x));
    // Values rounding past the largest bf16 become infinity in both.
    ASSERT_EQ(std::bit_cast<uint32_t>(actual), std::bit_cast<uint32_t>(expected)) << x;
  }
}

// clang before 15 has no _Float16 on x86 (the sanitizer build): the
// compiler's conversion, the reference here, is then missing.
#if defined(__clang__) && __clang_major__ < 15
#define TANDEM_NO_FLOAT16_REFERENCE 1
#endif

TEST(Convert, F16MatchesCompilerConversion) {
#ifdef TANDEM_NO_FLOAT16_REFERENCE
  GTEST_SKIP() << "no _Float16 in this compiler";
#else
  for (float x : interesting_floats()) {
    const auto expected = static_cast<float>(static_cast<_Float16>(x));
    const float actual = f16_to_float(float_to_f16(x));
    ASSERT_EQ(std::bit_cast<uint32_t>(actual), std::bit_cast<uint32_t>(expected))
        << x << " bits " << std::hex << std::bit_cast<uint32_t>(x);
  }
#endif
}

TEST(Convert, EveryHalfRoundTrips) {
#ifdef TANDEM_NO_FLOAT16_REFERENCE
  GTEST_SKIP() << "no _Float16 in this compiler";
#else
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_float(static_cast<uint16_t>(h));
    const auto expected = static_cast<float>(std::bit_cast<_Float16>(static_cast<uint16_t>(h)));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(expected));
      ASSERT_TRUE(std::isnan(f16_to_float(float_to_f16(f))));
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(f), std::bit_cast<uint32_t>(expected)) << h;
    ASSERT_EQ(float_to_f16(f), h) << h;
    const float b = bf16_to_float(static_cast<uint16_t>(h));
    if (!std::isnan(b)) {
      ASSERT_EQ(float_to_bf16(b), h);
    }
  }
#endif
}

TEST(Convert, NanStaysNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(nan))));
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(nan))));
  // A signalling NaN whose payload is only in the low bits must not become infinity.
  const float low_payload = std::bit_cast<float>(0x7F800001u);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(low_payload))));
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(low_payload))));
}

TEST(Convert, BulkMatchesScalarForAllPairs) {
  const std::vector<float> values = interesting_floats();
  const auto n = static_cast<int64_t>(values.size());
  std::vector<uint16_t> bf(values.size()), half(values.size());
  convert(values.data(), DType::f32, bf.data(), DType::bf16, n);
  convert(values.data(), DType::f32, half.data(), DType::f16, n);
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(bf[i], float_to_bf16(values[i])) << i;
    ASSERT_EQ(half[i], float_to_f16(values[i])) << i;
  }
  std::vector<float> back(values.size());
  convert(bf.data(), DType::bf16, back.data(), DType::f32, n);
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(back[i], bf16_to_float(bf[i]));
  convert(half.data(), DType::f16, back.data(), DType::f32, n);
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isnan(back[i])) {
      ASSERT_EQ(back[i], f16_to_float(half[i]));
    }
  }
}

TEST(Convert, BulkF16MatchesScalarBitForBitOnEveryPattern) {
  // Every f16 (NaNs included) widened in bulk, then narrowed back: the
  // vector instructions and the scalar code agree on every bit.
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> wide(all.size());
  convert(all.data(), DType::f16, wide.data(), DType::f32, 65536);
  std::vector<uint16_t> narrow(all.size());
  convert(wide.data(), DType::f32, narrow.data(), DType::f16, 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(std::bit_cast<uint32_t>(wide[h]), std::bit_cast<uint32_t>(f16_to_float(all[h]))) << h;
    ASSERT_EQ(narrow[h], float_to_f16(wide[h])) << h;
  }
}

TEST(Convert, BulkBf16MatchesScalarBitForBit) {
  const std::vector<float> values = bf16_rounding_cases();
  std::vector<uint16_t> bulk(values.size());
  convert(values.data(), DType::f32, bulk.data(), DType::bf16, static_cast<int64_t>(values.size()));
  expect_float_to_bf16_bits(values.data(), bulk.data(), values.size());
}

// Each cast loop this CPU runs, on the cases in order and shuffled: the
// native loop hands a block holding a subnormal to the integer one, and
// shuffled, subnormals share blocks with normal values.
TEST(Convert, EveryBf16CastLoopMatchesScalarBitForBit) {
  const std::vector<float> values = bf16_rounding_cases();
  const std::vector<float> mixed = shuffled(values, 12);
  using Loop = void (*)(const float*, uint16_t*, int64_t);
  std::vector<std::pair<const char*, Loop>> loops = {{"portable", detail::f32_to_bf16_portable}};
  if (detail::cpu_runs_f32_to_bf16_avx512())
    loops.emplace_back("avx512", detail::f32_to_bf16_avx512);
  if (detail::cpu_runs_f32_to_bf16_native())
    loops.emplace_back("native", detail::f32_to_bf16_native);
  for (const auto& [name, loop] : loops) {
    SCOPED_TRACE(name);
    for (const std::vector<float>* v : {&values, &mixed}) {
      // A count short of a multiple of 16 leaves every loop a tail.
      const size_t n = v->size() - 5;
      std::vector<uint16_t> bits(n);
      loop(v->data(), bits.data(), static_cast<int64_t>(n));
      expect_float_to_bf16_bits(v->data(), bits.data(), n);
    }
  }
}

TEST(Convert, IntegerTargetsRoundAndSaturate) {
  const float in[] = {-3.5f, -0.4f, 2.5f, 300.0f, 1e12f, std::numeric_limits<float>::quiet_NaN()};
  uint8_t u8[6];
  int32_t i32[6];
  convert(in, DType::f32, u8, DType::u8, 6);
  convert(in, DType::f32, i32, DType::i32, 6);
  EXPECT_EQ(std::vector<int>(u8, u8 + 6), (std::vector<int>{0, 0, 2, 255, 255, 0}));
  EXPECT_EQ(std::vector<int32_t>(i32, i32 + 6),
            (std::vector<int32_t>{-4, 0, 2, 300, std::numeric_limits<int32_t>::max(), 0}));
}

// Between integer types exactly (no trip through float, whose 24 bits would
// round these), saturating into narrower ones.
TEST(Convert, IntegersConvertExactlyAndSaturate) {
  const int64_t wide[] = {(int64_t{1} << 40) + 1, -(int64_t{1} << 40), 16777217, -1, 300};
  int32_t i32[5];
  uint8_t u8[5];
  convert(wide, DType::i64, i32, DType::i32, 5);
  convert(wide, DType::i64, u8, DType::u8, 5);
  EXPECT_EQ(std::vector<int32_t>(i32, i32 + 5),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::max(),
                                  std::numeric_limits<int32_t>::min(), 16777217, -1, 300}));
  EXPECT_EQ(std::vector<int>(u8, u8 + 5), (std::vector<int>{255, 0, 255, 0, 255}));
  int64_t back[5];
  convert(i32, DType::i32, back, DType::i64, 5);
  EXPECT_EQ(back[2], 16777217);  // exact past 2^24
  convert(u8, DType::u8, back, DType::i64, 5);
  EXPECT_EQ(back[0], 255);
  const float in[] = {-3.5f, 2.5f, 1e30f, -1e30f, std::numeric_limits<float>::quiet_NaN()};
  convert(in, DType::f32, back, DType::i64, 5);
  EXPECT_EQ(std::vector<int64_t>(back, back + 5),
            (std::vector<int64_t>{-4, 2, std::numeric_limits<int64_t>::max(),
                                  std::numeric_limits<int64_t>::min(), 0}));
  float out[2];
  convert(wide + 2, DType::i64, out, DType::f32, 2);
  EXPECT_EQ(out[0], 16777216.0f);  // to float: rounded to nearest even
  EXPECT_EQ(out[1], -1.0f);
}

}  // namespace
}  // namespace tandem
