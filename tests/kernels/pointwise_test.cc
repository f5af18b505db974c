// Hand-written kernels beyond their op-table rows: threading, special values,
// dtype mixes, determinism and errors.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string>

#include "support/errors.h"
#include "support/gradcheck.h"
#include "support/reference.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/kernels/activation.h"
#include "tandem/kernels/detail/amx.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/kernels/detail/fast_exp.h"
#include "tandem/kernels/detail/gelu_avx512.h"
#include "tandem/kernels/dropout.h"
#include "tandem/kernels/elementwise.h"
#include "tandem/kernels/embedding.h"
#include "tandem/kernels/loss.h"
#include "tandem/kernels/normalization.h"
#include "tandem/kernels/reduce.h"
#include "tandem/kernels/softmax.h"
#include "tandem/tensor/convert.h"

namespace tandem {
namespace {

using testing::expect_close;
using testing::random_tensor;
using testing::to_doubles;

// Values and gradients of the pointwise kernels are rows of the op table
// (tests/support/op_rows_pointwise.cc); what follows is what a row cannot say.

TEST(Elementwise, BroadcastingRefusesShapesThatDoNotFit) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor a = random_tensor(Shape{6, 4, 5}, -2, 2, 3).to(d);
    EXPECT_THROW(kernels::add(a, random_tensor(Shape{4}, 0, 1, 1).to(d)), ShapeError);
    EXPECT_THROW(kernels::mul(a, random_tensor(Shape{6, 1, 5}, 0, 1, 1).to(d)), ShapeError);
  }
  const Tensor a = random_tensor(Shape{6, 4, 5}, -2, 2, 3);
  EXPECT_THROW(kernels::add(a, random_tensor(Shape{6, 4, 5}, 0, 1, 1).to(DType::i32)), ShapeError);
}

// Broadcasting over more rows than one thread's share: the threads' chunks
// start and end in the middle of b's repeats.
TEST(Elementwise, BroadcastAddSplitsMidRepeatAcrossThreads) {
  NumThreadsScope threads(2);
  const Tensor a = random_tensor(Shape{37, 1001}, -2, 2, 5);
  const Tensor b = random_tensor(Shape{1001}, -2, 2, 6);
  const std::vector<float> av = a.to_floats(), bv = b.to_floats(),
                           out = kernels::add(a, b).to_floats();
  for (size_t i = 0; i < av.size(); ++i)
    ASSERT_EQ(out[i], av[i] + bv[i % bv.size()]) << "element " << i;
}

// The vectorisable exp of the attention rows against libm's expf.
TEST(FastExp, WithinTwoUlpOfExpfAndKeepsSpecialValues) {
  const auto ulps = [](float a, float b) {
    return std::abs(static_cast<int64_t>(std::bit_cast<int32_t>(a)) - std::bit_cast<int32_t>(b));
  };
  for (float x = -87.0f; x < 88.0f; x += 0.000731f) {
    const float want = std::exp(x), got = kernels::detail::fast_exp(x);
    ASSERT_LE(ulps(want, got), 2) << "exp(" << x << ") = " << want << ", fast_exp gives " << got;
  }
  EXPECT_EQ(kernels::detail::fast_exp(0.0f), 1.0f);
  EXPECT_EQ(kernels::detail::fast_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(kernels::detail::fast_exp(-100.0f), 0.0f);
  EXPECT_EQ(kernels::detail::fast_exp(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(kernels::detail::fast_exp(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(kernels::detail::fast_exp(std::numeric_limits<float>::quiet_NaN())));
}

// bf16 add and multiply (16 at a time on AVX-512, the rest one by one)
// round each result as float_to_bf16 does, bit for bit, specials included,
// over a length that leaves a tail.
TEST(Elementwise, Bf16AddAndMulRoundEachResultAsTheScalarConversion) {
  const int64_t n = 16 * 40 + 7;
  std::vector<uint16_t> a_bits(static_cast<size_t>(n)), b_bits(static_cast<size_t>(n));
  uint64_t state = 12345;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    a_bits[i] = static_cast<uint16_t>(state >> 48);
    b_bits[i] = static_cast<uint16_t>(state >> 32);
  }
  // Halfway cases, overflow to infinity, NaN, infinities and subnormals.
  const uint16_t special[] = {0x3F80, 0x3F81, 0x7F7F, 0x7FC1, 0xFF80, 0x0001, 0x8001, 0x7F80};
  for (size_t i = 0; i < std::size(special); ++i) {
    a_bits[i] = special[i];
    b_bits[i] = special[(i + 3) % std::size(special)];
  }
  const Tensor a = Tensor::wrap(a_bits.data(), Shape{n}, DType::bf16, cpu_device());
  const Tensor b = Tensor::wrap(b_bits.data(), Shape{n}, DType::bf16, cpu_device());
  for (const bool multiply : {false, true}) {
    const Tensor z = multiply ? kernels::mul(a, b) : kernels::add(a, b);
    const auto* bits = static_cast<const uint16_t*>(z.raw_data());
    for (int64_t i = 0; i < n; ++i) {
      const float x = bf16_to_float(a_bits[i]), y = bf16_to_float(b_bits[i]);
      const uint16_t expected = float_to_bf16(multiply ? x * y : x + y);
      ASSERT_EQ(bits[i], expected) << (multiply ? "mul" : "add") << " at " << i;
    }
  }
}

// GELU (16 lanes at a time on AVX-512, oneDNN or scalar loops elsewhere)
// far from zero and at the specials, both forms, f32 and bf16: values and
// slopes exact where they saturate, NaN where the formula multiplies an
// infinity by zero (as the scalar formula and PyTorch do), a NaN kept.
TEST(Activation, GeluSaturatesExactlyAndKeepsSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    float x, value, slope;  // NaN: expect NaN
  };
  const Case cases[] = {{30.0f, 30.0f, 1.0f}, {-30.0f, 0.0f, 0.0f}, {1e5f, 1e5f, 1.0f},
                        {-1e5f, 0.0f, 0.0f},  {0.0f, 0.0f, 0.5f},   {inf, inf, nan},
                        {-inf, nan, nan},     {nan, nan, nan}};
  // A tail past the 16-lane blocks: the cases repeated over 37 elements.
  const int64_t n = 37;
  std::vector<float> xs(n), ones(n, 1.0f);
  for (int64_t i = 0; i < n; ++i) xs[i] = cases[i % std::size(cases)].x;
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = Tensor::from_floats(Shape{n}, xs).to(dtype);
    const Tensor dy = Tensor::from_floats(Shape{n}, ones).to(dtype);
    const std::vector<double> stored = to_doubles(x);
    for (const kernels::Activation form :
         {kernels::Activation::gelu, kernels::Activation::gelu_tanh}) {
      const std::vector<double> value = to_doubles(kernels::activate(form, x));
      const std::vector<double> slope = to_doubles(kernels::activation_backward(form, dy, x));
      for (int64_t i = 0; i < n; ++i) {
        const Case& c = cases[i % std::size(cases)];
        const std::string at = std::string(kernels::activation_name(form)) + " " +
                               std::string(dtype_name(dtype)) + " at " + std::to_string(c.x);
        if (std::isnan(c.value)) {
          EXPECT_TRUE(std::isnan(value[i])) << at << ": " << value[i];
        } else {
          // x itself as the dtype holds it (1e5 rounds in bf16), or 0.
          EXPECT_EQ(value[i], c.value == c.x ? stored[i] : c.value) << at;
        }
        if (std::isnan(c.slope)) {
          EXPECT_TRUE(std::isnan(slope[i])) << at << ": slope " << slope[i];
        } else {
          EXPECT_EQ(slope[i], c.slope) << at << ": slope";
        }
      }
    }
  }
}

// bf16 GELU looked up in its tables against GELU computed: the same bits
// for every one of the 65,536 inputs (a NaN for a NaN), forward and
// backward, including the results that round to subnormals (which
// AVX512-BF16's conversion, where the CPU has it, leaves to the integer
// rounding; kernels.avx512_core runs this test with the integer rounding
// only).
TEST(Activation, GeluBf16LookupsGiveTheComputedBits) {
  if (!kernels::detail::has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  const int64_t n = 65536;
  Tensor x = Tensor::empty(Shape{n}, DType::bf16);
  auto* bits = static_cast<uint16_t*>(x.raw_data());
  for (int64_t i = 0; i < n; ++i) bits[i] = static_cast<uint16_t>(i);
  // dy of both signs and magnitudes that carry slopes to subnormal products.
  const Tensor dy = random_tensor(Shape{n}, -2, 2, 7).to(DType::bf16);
  using kernels::detail::Bf16Path;
  bool subnormal = false;
  for (const kernels::Activation form :
       {kernels::Activation::gelu, kernels::Activation::gelu_tanh}) {
    const Tensor looked_up = kernels::detail::gelu_avx512(form, x, Bf16Path::fastest);
    const Tensor computed = kernels::detail::gelu_avx512(form, x, Bf16Path::computed);
    const Tensor looked_up_slope =
        kernels::detail::gelu_backward_avx512(form, dy, x, Bf16Path::fastest);
    const Tensor computed_slope =
        kernels::detail::gelu_backward_avx512(form, dy, x, Bf16Path::computed);
    const auto* a = static_cast<const uint16_t*>(looked_up.raw_data());
    const auto* b = static_cast<const uint16_t*>(computed.raw_data());
    const auto* c = static_cast<const uint16_t*>(looked_up_slope.raw_data());
    const auto* d = static_cast<const uint16_t*>(computed_slope.raw_data());
    // A NaN's sign and payload are the compiler's choice of operand order
    // (a sanitizer build gave them differently): any NaN for a NaN.
    const auto nan = [](uint16_t v) { return (v & 0x7F80) == 0x7F80 && (v & 0x7F) != 0; };
    for (int64_t i = 0; i < n; ++i) {
      if (!(nan(a[i]) && nan(b[i]))) {
        ASSERT_EQ(a[i], b[i]) << kernels::activation_name(form) << " at bits " << i;
      }
      if (!(nan(c[i]) && nan(d[i]))) {
        ASSERT_EQ(c[i], d[i]) << kernels::activation_name(form) << " slope at bits " << i;
      }
      subnormal = subnormal || ((b[i] & 0x7F80) == 0 && (b[i] & 0x7F) != 0);
    }
  }
  EXPECT_TRUE(subnormal) << "no subnormal result: the inputs miss the case they are for";
  // A run that is not a whole number of blocks, at an offset: the tail.
  const Tensor part = x.slice(1000, 1037);
  EXPECT_EQ(kernels::detail::gelu_avx512(kernels::Activation::gelu_tanh, part).to_floats(),
            kernels::detail::gelu_avx512(kernels::Activation::gelu_tanh, part, Bf16Path::computed)
                .to_floats());
}

// TANDEM_MAX_CPU_ISA: avx2 turns tandem's AVX-512 kernels off, avx512_core
// their AVX512-BF16 instructions, avx512 their AMX kernels, amx or nothing
// leaves them to the CPU, anything else is refused by name.
TEST(CpuIsa, TheCapIsReadAndABadValueIsRefused) {
  const char* before = std::getenv("TANDEM_MAX_CPU_ISA");
  const std::string saved = before == nullptr ? "" : before;
  ::setenv("TANDEM_MAX_CPU_ISA", "avx2", 1);
  EXPECT_FALSE(kernels::detail::avx512_allowed());
  EXPECT_FALSE(kernels::detail::avx512_bf16_allowed());
  EXPECT_FALSE(kernels::detail::amx_allowed());
  ::setenv("TANDEM_MAX_CPU_ISA", "avx512_core", 1);
  EXPECT_TRUE(kernels::detail::avx512_allowed());
  EXPECT_FALSE(kernels::detail::avx512_bf16_allowed());
  EXPECT_FALSE(kernels::detail::amx_allowed());
  ::setenv("TANDEM_MAX_CPU_ISA", "avx512", 1);
  EXPECT_TRUE(kernels::detail::avx512_allowed());
  EXPECT_TRUE(kernels::detail::avx512_bf16_allowed());
  EXPECT_FALSE(kernels::detail::amx_allowed());
  ::setenv("TANDEM_MAX_CPU_ISA", "amx", 1);
  EXPECT_TRUE(kernels::detail::avx512_allowed());
  EXPECT_TRUE(kernels::detail::avx512_bf16_allowed());
  EXPECT_TRUE(kernels::detail::amx_allowed());
  ::setenv("TANDEM_MAX_CPU_ISA", "sse", 1);
  testing::expect_contains(
      testing::error_message<InvalidArgument>([] { kernels::detail::avx512_allowed(); }),
      "TANDEM_MAX_CPU_ISA must be avx2, avx512_core, avx512 or amx, got \"sse\"");
  ::unsetenv("TANDEM_MAX_CPU_ISA");
  EXPECT_TRUE(kernels::detail::avx512_allowed());
  EXPECT_TRUE(kernels::detail::amx_allowed());
  if (before != nullptr) ::setenv("TANDEM_MAX_CPU_ISA", saved.c_str(), 1);
}

TEST(Elementwise, AddIntoAccumulatesAcrossDTypes) {
  Tensor dst = Tensor::full(Shape{10}, 1.0f);
  kernels::add_into(dst, Tensor::full(Shape{10}, 2.0f, DType::bf16), 0.5f);
  EXPECT_EQ(dst.to_floats(), std::vector<float>(10, 2.0f));
  EXPECT_THROW(kernels::add_into(dst, Tensor::full(Shape{9}, 1.0f)), ShapeError);
}

// add_into of a tensor of its own dtype (a gradient accumulated into its buffer) runs
// add()'s vector loops in place: add()'s bits, at every length and split,
// and with the destination as its own source.
TEST(Elementwise, AddIntoOfTheSameDTypeGivesAddsBits) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (int64_t n : {1, 15, 16, 17, 33, 100003}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " x " + std::to_string(n));
      std::vector<float> a(static_cast<size_t>(n)), b(a.size());
      for (size_t i = 0; i < a.size(); ++i) {
        a[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
        b[i] = std::cos(0.11f * static_cast<float>(i)) / 7.0f;
      }
      const Tensor x = Tensor::from_floats(Shape{n}, a).to(dtype);
      const Tensor y = Tensor::from_floats(Shape{n}, b).to(dtype);
      Tensor dst = x.clone();
      kernels::add_into(dst, y);
      EXPECT_EQ(dst.to_floats(), kernels::add(x, y).to_floats());
      Tensor twice = x.clone();
      kernels::add_into(twice, twice);
      EXPECT_EQ(twice.to_floats(), kernels::add(x, x).to_floats());
    }
  }
}

TEST(Reduce, SumMeanAndSumToShape) {
  for (DType d : {DType::f32, DType::bf16}) {
    const Tensor x = random_tensor(Shape{37, 3, 11}, -1, 1, 5).to(d);
    const std::vector<double> xs = to_doubles(x);
    const double total = std::accumulate(xs.begin(), xs.end(), 0.0);
    EXPECT_NEAR(kernels::sum(x).item(), total, 1e-4);
    EXPECT_NEAR(kernels::mean(x).item(), total / xs.size(), 1e-6);
    std::vector<double> cols(33, 0.0);
    for (size_t i = 0; i < xs.size(); ++i) cols[i % 33] += xs[i];
    expect_close(to_doubles(kernels::sum_to_shape(x, Shape{3, 11})), cols, 1e-5, 1e-5,
                 "sum_to_shape");
    EXPECT_EQ(kernels::sum_to_shape(x, Shape{1}).shape(), Shape{1});
  }
  EXPECT_TRUE(std::isnan(kernels::mean(Tensor::empty(Shape{0})).item()));
  EXPECT_THROW(kernels::sum_to_shape(Tensor::empty(Shape{2, 3}), Shape{2}), ShapeError);
}

TEST(Reduce, ResultDoesNotDependOnThreadCount) {
  const Tensor x = random_tensor(Shape{1 << 20}, -1, 1, 6);
  set_num_threads(1);
  const float one = kernels::sum(x).item();
  set_num_threads(2);
  EXPECT_EQ(kernels::sum(x).item(), one);
}

TEST(Loss, StableForHugeLogitsAndChecksLabels) {
  const Tensor logits =
      Tensor::from_floats(Shape{2, 3}, std::vector<float>{1000, 0, -1000, -1000, 0, 1000});
  const Tensor labels = Tensor::from_ints(Shape{2}, std::vector<int32_t>{2, 2});
  const auto r = kernels::softmax_cross_entropy(logits, labels);
  EXPECT_NEAR(r.loss.item(), 1000.0, 1e-3);
  EXPECT_TRUE(std::isfinite(r.loss.item()));
  EXPECT_EQ(kernels::count_correct(logits, labels), 1);
  try {
    kernels::softmax_cross_entropy(logits, Tensor::from_ints(Shape{2}, std::vector<int32_t>{0, 3}));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("row 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kernels::softmax_cross_entropy(
                   logits, Tensor::from_ints(Shape{3}, std::vector<int32_t>{0, 1, 2})),
               ShapeError);
  const std::vector<float> p = kernels::softmax(logits).to_floats();
  EXPECT_NEAR(p[0], 1.0f, 1e-6);
  // Equal logits far from zero: a third each (a shift of max + log 3 rounded
  // to f32 near 1e6 gave 0.3247).
  const Tensor far = Tensor::full(Shape{2, 3}, 1e6f);
  for (const float v : kernels::softmax(far).to_floats()) EXPECT_NEAR(v, 1.0f / 3.0f, 1e-6f);
  for (const float v : kernels::log_softmax(far).to_floats()) {
    EXPECT_NEAR(v, -std::log(3.0f), 1e-6f);
  }
}

TEST(Dropout, KeepsAboutOneMinusPScaledAndIsDeterministic) {
  const Tensor x = Tensor::full(Shape{100000}, 1.0f);
  const auto a = kernels::dropout(x, 0.3f, 42, 0);
  const std::vector<float> ys = a.y.to_floats();
  int64_t kept = 0;
  for (float v : ys) {
    ASSERT_TRUE(v == 0.0f || std::abs(v - 1.0f / 0.7f) < 1e-6f);
    kept += v != 0.0f;
  }
  EXPECT_NEAR(kept / 100000.0, 0.7, 0.01);
  set_num_threads(1);
  const auto b = kernels::dropout(x, 0.3f, 42, 0);
  set_num_threads(2);
  EXPECT_EQ(b.y.to_floats(), ys);
  EXPECT_NE(kernels::dropout(x, 0.3f, 42, 1).y.to_floats(), ys);
  const Tensor dx = kernels::dropout_backward(Tensor::full(Shape{100000}, 2.0f), a.mask, 0.3f);
  const std::vector<float> dxs = dx.to_floats();
  for (size_t i = 0; i < dxs.size(); ++i) ASSERT_FLOAT_EQ(dxs[i], ys[i] * 2.0f);
  EXPECT_THROW(kernels::dropout(x, 1.0f, 0, 0), InvalidArgument);
  EXPECT_THROW(kernels::dropout(x, -0.1f, 0, 0), InvalidArgument);
}

// The oneDNN path (f32, bf16) against the split kernels that synchronised
// batch norm and f16 use: the same statistics, outputs and gradients.
TEST(Normalization, BatchNormPrimitiveMatchesTheSplitKernels) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    // Channel counts below, at and above a SIMD width (8 on AVX2, 16 on
    // AVX-512), with many rows: resnet's width=4 stem.
    // And rows over several of the row kernels' blocks (4,096 values each).
    for (const Shape& shape : {Shape{7, 5}, Shape{2, 9, 9, 16}, Shape{3, 5, 5, 33},
                               Shape{4, 28, 28, 4}, Shape{2, 14, 14, 3}, Shape{1, 1, 1, 1},
                               Shape{8, 9, 9, 16}, Shape{4, 10, 10, 32}, Shape{2, 12, 12, 64}}) {
      const std::string where = std::string(dtype_name(dtype)) + shape.to_string();
      const int64_t C = shape.dim(-1);
      const Tensor x = random_tensor(shape, -2, 4, 41).to(dtype);
      const Tensor dy = random_tensor(shape, -1, 1, 42).to(dtype);
      const Tensor gamma = random_tensor(Shape{C}, 0.5, 1.5, 43),
                   beta = random_tensor(Shape{C}, -1, 1, 44);
      Tensor rm = Tensor::zeros(Shape{C}), rv = Tensor::full(Shape{C}, 1.0f);
      const kernels::BatchNormResult r =
          kernels::batch_norm_train(x, gamma, beta, rm, rv, 0.1f, 1e-5f);
      const kernels::Moments m = kernels::batch_norm_moments(x);
      expect_close(to_doubles(r.mean), to_doubles(m.mean), 1e-5, 1e-5, (where + " mean").c_str());
      expect_close(to_doubles(r.variance), to_doubles(m.variance), 1e-5, 1e-5,
                   (where + " var").c_str());
      const Tensor rstd = kernels::inverse_std(m.variance, 1e-5f);
      const double tol = dtype == DType::f32 ? 1e-5 : 1e-2;
      expect_close(to_doubles(r.y),
                   to_doubles(kernels::batch_norm_apply(x, m.mean, rstd, gamma, beta)), tol, tol,
                   (where + " y").c_str());
      const kernels::NormGrads g =
          kernels::batch_norm_backward(dy, x, r.mean, r.variance, gamma, 1e-5f);
      const kernels::BatchNormSums sums = kernels::batch_norm_backward_sums(dy, x, m.mean, rstd);
      const Tensor dx =
          kernels::batch_norm_backward_dx(dy, x, m.mean, rstd, gamma, sums, x.numel() / C);
      expect_close(to_doubles(g.dx), to_doubles(dx), tol, tol, (where + " dx").c_str());
      expect_close(to_doubles(g.dgamma), to_doubles(sums.sum_dy_xhat), 1e-4, 1e-4,
                   (where + " dgamma").c_str());
      expect_close(to_doubles(g.dbeta), to_doubles(sums.sum_dy), 1e-4, 1e-4,
                   (where + " dbeta").c_str());
    }
  }
}

// A mean far from zero against a small spread (1000 +- 0.01): statistics
// from sums of x in f32 would lose the variance to cancellation. Rows not a
// multiple of the kernels' blocks, 16 and 64 channels.
TEST(Normalization, BatchNormStatisticsKeepTheirPrecisionFarFromZero) {
  for (const Shape& shape : {Shape{3, 7, 11, 16}, Shape{2, 5, 5, 64}}) {
    SCOPED_TRACE(shape.to_string());
    const int64_t C = shape.dim(-1), R = shape.numel() / C;
    const Tensor x = random_tensor(shape, 999.99, 1000.01, 49);
    Tensor rm = Tensor::zeros(Shape{C}), rv = Tensor::full(Shape{C}, 1.0f);
    const Tensor gamma = Tensor::full(Shape{C}, 1.0f), beta = Tensor::zeros(Shape{C});
    const kernels::BatchNormResult r =
        kernels::batch_norm_train(x, gamma, beta, rm, rv, 0.1f, 1e-5f, true);
    const std::vector<double> xs = to_doubles(x);
    std::vector<double> mean(C, 0.0), var(C, 0.0);
    for (size_t i = 0; i < xs.size(); ++i) mean[i % C] += xs[i] / static_cast<double>(R);
    for (size_t i = 0; i < xs.size(); ++i) {
      const double d = xs[i] - mean[i % C];
      var[i % C] += d * d / static_cast<double>(R);
    }
    const std::vector<double> got_mean = to_doubles(r.mean), got_var = to_doubles(r.variance);
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_NEAR(got_mean[c], mean[c], 1e-4) << c;
      EXPECT_NEAR(got_var[c], var[c], 1e-3 * var[c]) << c;
    }
  }
}

TEST(Normalization, BatchNormFusedReluIsReluOfBatchNorm) {
  // Channel counts that fill SIMD registers, and 4 and 3 that do not (the
  // fused ReLU's workspace is laid out by them).
  for (const Shape& shape : {Shape{4, 6, 6, 16}, Shape{4, 28, 28, 4}, Shape{2, 7, 7, 3}}) {
    SCOPED_TRACE(shape.to_string());
    const int64_t C = shape.dim(-1);
    const Tensor x = random_tensor(shape, -2, 2, 45), dy = random_tensor(shape, -1, 1, 46);
    const Tensor gamma = random_tensor(Shape{C}, 0.5, 1.5, 47),
                 beta = random_tensor(Shape{C}, -0.5, 0.5, 48);
    Tensor rm = Tensor::zeros(Shape{C}), rv = Tensor::full(Shape{C}, 1.0f);
    ASSERT_TRUE(kernels::batch_norm_fuses_relu(x));
    const auto plain = kernels::batch_norm_train(x, gamma, beta, rm, rv, 0.1f, 1e-5f);
    const auto fused = kernels::batch_norm_train(x, gamma, beta, rm, rv, 0.1f, 1e-5f, true);
    const std::vector<float> y = plain.y.to_floats(), yr = fused.y.to_floats(), g = dy.to_floats();
    std::vector<float> masked(g.size());
    int positive = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      // The fused kernel may sum the statistics in another order (AVX2).
      ASSERT_NEAR(yr[i], std::max(y[i], 0.0f), 1e-5f * (1.0f + std::abs(y[i]))) << i;
      masked[i] = yr[i] > 0.0f ? g[i] : 0.0f;
      positive += yr[i] > 0.0f;
    }
    EXPECT_GT(positive, 0);
    EXPECT_LT(positive, static_cast<int>(y.size()));
    const auto through_relu = kernels::batch_norm_backward(dy, x, fused.mean, fused.variance, gamma,
                                                           1e-5f, fused.relu_mask);
    const auto reference = kernels::batch_norm_backward(Tensor::from_floats(shape, masked), x,
                                                        plain.mean, plain.variance, gamma, 1e-5f);
    expect_close(to_doubles(through_relu.dx), to_doubles(reference.dx), 1e-5, 1e-5, "dx");
    expect_close(to_doubles(through_relu.dgamma), to_doubles(reference.dgamma), 1e-5, 1e-5,
                 "dgamma");
    expect_close(to_doubles(through_relu.dbeta), to_doubles(reference.dbeta), 1e-5, 1e-5, "dbeta");
    if (C != 16) continue;
    // f16 runs on the split kernels, which have no fused ReLU.
    const Tensor half = x.to(DType::f16);
    EXPECT_FALSE(kernels::batch_norm_fuses_relu(half));
    EXPECT_THROW(kernels::batch_norm_train(half, gamma, beta, rm, rv, 0.1f, 1e-5f, true),
                 InvalidArgument);
    EXPECT_NO_THROW(kernels::batch_norm_train(half, gamma, beta, rm, rv, 0.1f, 1e-5f));
  }
}

// Several blocks of rows split between 1 to 3 threads: the same bits of
// y, the statistics, the ReLU mask and every gradient.
TEST(Normalization, BatchNormGivesTheSameBitsOnAnyThreadCount) {
  for (const Shape& shape : {Shape{8, 9, 9, 16}, Shape{4, 10, 10, 32}, Shape{3, 7, 9, 48}}) {
    for (const DType dtype : {DType::f32, DType::bf16}) {
      for (const bool relu : {false, true}) {
        SCOPED_TRACE(shape.to_string() + " " + std::string(dtype_name(dtype)) +
                     (relu ? " relu" : ""));
        const int64_t C = shape.dim(-1);
        const Tensor x = random_tensor(shape, -2, 3, 51).to(dtype);
        const Tensor dy = random_tensor(shape, -1, 1, 52).to(dtype);
        const Tensor gamma = random_tensor(Shape{C}, 0.5, 1.5, 53),
                     beta = random_tensor(Shape{C}, -1, 1, 54);
        std::vector<std::vector<uint8_t>> by_threads[3];
        for (int threads = 1; threads <= 3; ++threads) {
          NumThreadsScope scope(threads);
          Tensor rm = Tensor::zeros(Shape{C}), rv = Tensor::full(Shape{C}, 1.0f);
          const kernels::BatchNormResult r =
              kernels::batch_norm_train(x, gamma, beta, rm, rv, 0.1f, 1e-5f, relu);
          const kernels::NormGrads g = kernels::batch_norm_backward(
              dy, x, r.mean, r.variance, gamma, 1e-5f, relu ? r.relu_mask : Tensor());
          for (const Tensor& t :
               {r.y, r.mean, r.variance, r.relu_mask, rm, rv, g.dx, g.dgamma, g.dbeta}) {
            by_threads[threads - 1].push_back(testing::storage_bytes(t));
          }
        }
        for (int t = 1; t < 3; ++t) EXPECT_EQ(by_threads[0], by_threads[t]) << t + 1 << " threads";
      }
    }
  }
}

// Bad parameters are refused before the running statistics change (f16
// runs the split kernels, which check gamma last); x without channels
// gets an error, not a division by zero.
TEST(Normalization, BatchNormRefusesBadInputWithTheRunningStatisticsUnchanged) {
  const Tensor x = random_tensor(Shape{4, 3, 3, 8}, -2, 2, 55).to(DType::f16);
  Tensor rm = Tensor::zeros(Shape{8}), rv = Tensor::full(Shape{8}, 1.0f);
  EXPECT_THROW(kernels::batch_norm_train(x, Tensor::full(Shape{7}, 1.0f), Tensor::zeros(Shape{8}),
                                         rm, rv, 0.1f, 1e-5f),
               ShapeError);
  EXPECT_EQ(rm.to_floats(), std::vector<float>(8, 0.0f));
  EXPECT_EQ(rv.to_floats(), std::vector<float>(8, 1.0f));
  const Tensor none = Tensor::zeros(Shape{4, 0}), empty = Tensor::zeros(Shape{0});
  EXPECT_THROW(kernels::batch_norm_backward(none, none, empty, empty, empty, 1e-5f),
               InvalidArgument);
}

TEST(Normalization, BatchNormTrainInferenceAndRunningStats) {
  const int64_t C = 5;
  const Tensor x = random_tensor(Shape{4, 3, 3, C}, -2, 4, 11);
  const Tensor gamma = random_tensor(Shape{C}, 0.5, 1.5, 12),
               beta = random_tensor(Shape{C}, -1, 1, 13);
  Tensor running_mean = Tensor::zeros(Shape{C}), running_var = Tensor::full(Shape{C}, 1.0f);
  const auto r = kernels::batch_norm_train(x, gamma, beta, running_mean, running_var, 0.1f, 1e-5f);
  const std::vector<double> xs = to_doubles(x), g = to_doubles(gamma), b = to_doubles(beta);
  const int64_t R = x.numel() / C;
  std::vector<double> mean(C, 0), var(C, 0), expected(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) mean[i % C] += xs[i] / R;
  for (size_t i = 0; i < xs.size(); ++i)
    var[i % C] += (xs[i] - mean[i % C]) * (xs[i] - mean[i % C]) / R;
  for (size_t i = 0; i < xs.size(); ++i) {
    const size_t c = i % C;
    expected[i] = (xs[i] - mean[c]) / std::sqrt(var[c] + 1e-5) * g[c] + b[c];
  }
  expect_close(to_doubles(r.y), expected, 1e-5, 1e-5, "batch_norm train");
  std::vector<double> rm(C), rv(C);
  for (int64_t c = 0; c < C; ++c) {
    rm[c] = 0.1 * mean[c];
    rv[c] = 0.9 + 0.1 * var[c] * R / (R - 1);
  }
  expect_close(to_doubles(running_mean), rm, 1e-6, 1e-5, "running mean");
  expect_close(to_doubles(running_var), rv, 1e-6, 1e-5, "running var");
  const Tensor inference =
      kernels::batch_norm_inference(x, gamma, beta, running_mean, running_var, 1e-5f);
  for (size_t i = 0; i < xs.size(); ++i) {
    const size_t c = i % C;
    expected[i] = (xs[i] - rm[c]) / std::sqrt(rv[c] + 1e-5) * g[c] + b[c];
  }
  expect_close(to_doubles(inference), expected, 1e-5, 1e-5, "batch_norm inference");
  EXPECT_THROW(kernels::batch_norm_train(x, Tensor::zeros(Shape{4}), beta, running_mean,
                                         running_var, 0.1f, 1e-5f),
               ShapeError);
}

TEST(Embedding, GatherAndScatterAdd) {
  const Tensor table = random_tensor(Shape{5, 3}, -1, 1, 14);
  const Tensor idx = Tensor::from_ints(Shape{2, 2}, std::vector<int32_t>{4, 0, 4, 2});
  const Tensor out = kernels::embedding(table, idx);
  ASSERT_EQ(out.shape(), (Shape{2, 2, 3}));
  const std::vector<float> t = table.to_floats(), o = out.to_floats();
  for (int i = 0; i < 4; ++i) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(o[i * 3 + c], t[idx.to_ints()[i] * 3 + c]);
  }
  const Tensor grad = kernels::embedding_backward(Tensor::full(Shape{2, 2, 3}, 1.0f), idx, 5);
  EXPECT_EQ(grad.to_floats(), (std::vector<float>{1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 2, 2, 2}));
  try {
    kernels::embedding(table, Tensor::from_ints(Shape{2}, std::vector<int32_t>{1, 5}));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("position 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(kernels::embedding(table.to(DType::bf16), idx).dtype(), DType::bf16);
}

}  // namespace
}  // namespace tandem
