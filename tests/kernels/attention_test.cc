// Attention beyond its op-table rows (tests/support/op_rows_layout.cc): against
// a composition of the primitive ops at longer sequences, packed inputs,
// dropout's determinism, scratch bounded by head groups, and bad arguments.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "support/gradcheck.h"
#include "support/reference.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/random.h"
#include "tandem/kernels/attention.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/kernels/layout.h"
#include "tandem/kernels/matmul.h"
#include "tandem/kernels/pool.h"
#include "tandem/tensor/allocator.h"

namespace tandem {
namespace {

using testing::expect_close;
using testing::random_tensor;
using testing::to_doubles;

// Inputs rounded to the dtype, so that kernel and reference see the same values.
Tensor in(const Shape& s, uint64_t seed, DType d, float lo = -2, float hi = 2) {
  return random_tensor(s, lo, hi, seed).to(d);
}

// Attention against softmax(q k^T / sqrt(D) + mask) v built from the primitive
// ops, forward and every gradient, also with more keys than queries and
// more queries than keys, and with heads and lengths (multiples of 16, 48
// not of 32) that take the kernels skipping the causal triangle.
TEST(Attention, MatchesTheCompositionOfPrimitiveOps) {
  for (DType d : {DType::f32, DType::bf16}) {
    for (const auto& [T, S, D] : std::vector<std::array<int64_t, 3>>{{11, 11, 8},
                                                                     {150, 150, 8},
                                                                     {100, 150, 8},
                                                                     {150, 100, 8},
                                                                     {48, 48, 32},
                                                                     {64, 64, 24}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(d) << " T=" << T << " S=" << S << " D=" << D);
      auto make = [&](const Shape& s, uint64_t seed) { return Variable(in(s, seed, d), true); };
      Variable q = make(Shape{2, 2, T, D}, 20), k = make(Shape{2, 2, S, D}, 21),
               v = make(Shape{2, 2, S, D}, 22);
      const Tensor dy = random_tensor(Shape{2, 2, T, D}, -1, 1, 23).to(d);
      // The causal mask as an additive (T, S) tensor, broadcast over (B, H).
      std::vector<float> mask(static_cast<size_t>(T * S));
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < S; ++j)
          mask[static_cast<size_t>(i * S + j)] = j > i ? -1e30f : 0.0f;
      const Variable additive(Tensor::from_floats(Shape{T, S}, mask));
      const Variable scores =
          add(scale(batched_matmul(cast(q, DType::f32), cast(k, DType::f32), false, true),
                    1.0f / std::sqrt(static_cast<float>(D))),
              additive);
      const Variable composed = batched_matmul(softmax(scores), cast(v, DType::f32));
      composed.backward(dy.to(DType::f32));
      const Tensor cq = q.grad().to(DType::f32), ck = k.grad().to(DType::f32),
                   cv = v.grad().to(DType::f32);
      q.zero_grad();
      k.zero_grad();
      v.zero_grad();
      const Variable fused = attention(q, k, v, {.causal = true});
      fused.backward(dy);
      const double tol = d == DType::f32 ? 1e-5 : 3e-2;
      EXPECT_LT(testing::relative_error(composed.value().to_floats(), fused.value().to_floats()),
                tol);
      EXPECT_LT(testing::relative_error(cq.to_floats(), q.grad().to_floats()), tol);
      EXPECT_LT(testing::relative_error(ck.to_floats(), k.grad().to_floats()), tol);
      EXPECT_LT(testing::relative_error(cv.to_floats(), v.grad().to_floats()), tol);
      // Keys beyond the last query are seen by none: no gradient.
      if (S > T) {
        const std::vector<float> dk = k.grad().to_floats();
        for (int64_t j = T; j < S; ++j) EXPECT_EQ(dk[static_cast<size_t>(j * D)], 0.0f);
      }
    }
  }
}

// attention_packed on (3, B, H, T, D) gives what attention gives on the
// thirds, forward and backward, with dropout drawing the same positions.
TEST(Attention, PackedQkvMatchesSeparateInputs) {
  for (DType d : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(d));
    const Shape packed_shape{3, 2, 2, 9, 8}, heads{2, 2, 9, 8};
    const Tensor packed = in(packed_shape, 80, d);
    const Tensor dy = random_tensor(heads, -1, 1, 81).to(d);
    const AttentionOptions options{.dropout = 0.2f, .training = true};
    Generator g1(5), g2(5);
    Variable whole(packed, true);
    const Variable fused = attention_packed(whole, options, &g1);
    fused.backward(dy);
    std::vector<Variable> thirds;
    for (int64_t i = 0; i < 3; ++i)
      thirds.emplace_back(packed.slice(i, i + 1).clone().reshape(heads), true);
    const Variable separate = attention(thirds[0], thirds[1], thirds[2], options, &g2);
    separate.backward(dy);
    EXPECT_EQ(fused.value().to_floats(), separate.value().to_floats());
    const std::vector<float> grads = whole.grad().to_floats();
    for (int64_t i = 0; i < 3; ++i) {
      const std::vector<float> want = thirds[static_cast<size_t>(i)].grad().to_floats();
      const auto begin = grads.begin() + static_cast<std::ptrdiff_t>(i * want.size());
      EXPECT_EQ(std::vector<float>(begin, begin + static_cast<std::ptrdiff_t>(want.size())), want)
          << "third " << i;
    }
  }
  EXPECT_THROW(attention_packed(Variable(Tensor::zeros(Shape{2, 1, 1, 4, 8}))), ShapeError);
  EXPECT_THROW(attention_packed(Variable(Tensor::zeros(Shape{3, 4, 8}))), ShapeError);
}

TEST(Attention, DropoutIsReproducibleAndActsAfterTheSoftmax) {
  const Shape s{1, 2, 64, 8};
  const Tensor q = random_tensor(s, -1, 1, 30), k = random_tensor(s, -1, 1, 31),
               v = random_tensor(s, -1, 1, 32);
  const auto a = kernels::attention(q, k, v, {.dropout = 0.25f, .seed = 9, .offset = 100});
  const auto b = kernels::attention(q, k, v, {.dropout = 0.25f, .seed = 9, .offset = 100});
  const auto plain = kernels::attention(q, k, v);
  EXPECT_EQ(a.out.to_floats(), b.out.to_floats());
  EXPECT_NE(a.out.to_floats(), plain.out.to_floats());
  // Same log-sum-exp: dropout acts after the softmax.
  EXPECT_EQ(a.lse.to_floats(), plain.lse.to_floats());
}

TEST(Attention, BadShapesAndOptionsAreErrors) {
  const Tensor q = Tensor::zeros(Shape{1, 2, 4, 8});
  EXPECT_THROW(kernels::attention(q, Tensor::zeros(Shape{1, 2, 4, 7}), q), ShapeError);
  EXPECT_THROW(kernels::attention(q.reshape(Shape{2, 4, 8}), q, q), ShapeError);
  EXPECT_THROW(kernels::attention(q, q.to(DType::bf16), q), ShapeError);
  EXPECT_THROW(kernels::attention(q, q, q, {.dropout = 1.0f}), InvalidArgument);
  EXPECT_THROW(kernels::attention(q, q, q, {.scale = -1.0f}), InvalidArgument);
  EXPECT_THROW(kernels::permute(q, std::vector<int>{0, 1, 1, 3}), ShapeError);
  EXPECT_THROW(kernels::slice(q, 2, 3, 5), ShapeError);
  EXPECT_THROW(kernels::slice(q, 4, 0, 1), ShapeError);
  const std::vector<Tensor> parts{q, Tensor::zeros(Shape{1, 3, 4, 7})};
  EXPECT_THROW(kernels::concat(parts, 1), ShapeError);
  EXPECT_THROW(kernels::batched_matmul(q, Tensor::zeros(Shape{2, 2, 8, 3})), ShapeError);
  EXPECT_THROW(kernels::global_avg_pool(Tensor::zeros(Shape{2, 3})), ShapeError);
}

TEST(Attention, ScoresAreBuiltAGroupOfHeadsAtATime) {
  // Bounded scratch: 512 KiB of f32 scores (a core's L2 holds them and
  // their probabilities), at least one head.
  EXPECT_EQ(kernels::attention_heads_per_group(256, 128, 128), 8);
  EXPECT_EQ(kernels::attention_heads_per_group(256, 64, 64), 32);
  EXPECT_EQ(kernels::attention_heads_per_group(2, 128, 128), 2);
  EXPECT_EQ(kernels::attention_heads_per_group(8, 4096, 4096), 1);
  // Many groups give the same result as one.
  const Shape s{3, 1, 1500, 4};
  const Tensor q = random_tensor(s, -1, 1, 40), k = random_tensor(s, -1, 1, 41),
               v = random_tensor(s, -1, 1, 42);
  ASSERT_EQ(kernels::attention_heads_per_group(3, 1500, 1500), 1);
  expect_close(to_doubles(kernels::attention(q, k, v).out),
               testing::attention_reference(to_doubles(q), to_doubles(k), to_doubles(v),
                                            {.B = 3, .T = 1500, .S = 1500, .D = 4}),
               1e-5, 1e-4, "attention over 3 groups");
}

// attention_interleaved hands whole groups of heads to the threads: 1 to 4
// threads give the same bits forward and backward, f32 and bf16, over 5
// groups of 8 heads (an odd count, the last partial) against its reference.
TEST(Attention, InterleavedGroupsGiveTheSameBitsOnAnyThreadCount) {
  const int64_t B = 9, T = 128, H = 4, D = 8;
  ASSERT_EQ(kernels::attention_heads_per_group(B * H, T, T), 8);
  for (DType d : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(d));
    const Tensor qkv = in(Shape{B, T, 3, H, D}, 90, d);
    const Tensor dout = random_tensor(Shape{B, T, H, D}, -1, 1, 91).to(d);
    const kernels::AttentionOptions options{.causal = true};
    std::vector<float> first_out, first_dqkv;
    for (int threads = 1; threads <= 4; ++threads) {
      NumThreadsScope scope(threads);
      const kernels::AttentionResult r = kernels::attention_interleaved(qkv, options);
      const Tensor dqkv = kernels::attention_interleaved_backward(dout, qkv, r.out, r.lse, options);
      if (threads == 1) {
        first_out = r.out.to_floats();
        first_dqkv = dqkv.to_floats();
        // Against attention() over the permuted thirds.
        const Tensor heads = kernels::permute(qkv, std::vector<int>{2, 0, 3, 1, 4});
        const Shape one{B, H, T, D};
        const kernels::AttentionResult want =
            kernels::attention(heads.slice(0, 1).reshape(one), heads.slice(1, 2).reshape(one),
                               heads.slice(2, 3).reshape(one), options);
        EXPECT_EQ(kernels::permute(want.out, std::vector<int>{0, 2, 1, 3}).to_floats(), first_out);
        continue;
      }
      EXPECT_EQ(r.out.to_floats(), first_out) << threads << " threads";
      EXPECT_EQ(dqkv.to_floats(), first_dqkv) << threads << " threads";
    }
  }
}

// attention_interleaved in bf16 at gpt's head size (32, which the bf16
// engines' products take) gives the bits of attention() and
// attention_backward() over the permuted thirds, causal or not, with and
// without dropout, on 1 and 2 threads, with groups of 8 heads that start
// and end inside a sequence (3 heads each).
TEST(Attention, InterleavedGivesAttentionsBitsForwardAndBackward) {
  const int64_t B = 4, T = 128, H = 3, D = 32;
  ASSERT_EQ(kernels::attention_heads_per_group(B * H, T, T), 8);
  const Tensor qkv = in(Shape{B, T, 3, H, D}, 93, DType::bf16);
  const Tensor dout = random_tensor(Shape{B, T, H, D}, -1, 1, 94).to(DType::bf16);
  const Tensor heads = kernels::permute(qkv, std::vector<int>{2, 0, 3, 1, 4});
  const Shape one{B, H, T, D};
  const Tensor q = heads.slice(0, 1).reshape(one), k = heads.slice(1, 2).reshape(one),
               v = heads.slice(2, 3).reshape(one);
  const std::vector<int> heads_first{0, 2, 1, 3};
  for (const bool causal : {true, false}) {
    for (const float dropout : {0.0f, 0.25f}) {
      const kernels::AttentionOptions options{.causal = causal, .dropout = dropout, .seed = 7};
      const kernels::AttentionResult want = kernels::attention(q, k, v, options);
      const kernels::AttentionGrads grads = kernels::attention_backward(
          kernels::permute(dout, heads_first), q, k, v, want.out, want.lse, options);
      const Shape third{1, B, H, T, D};
      const std::vector<Tensor> thirds{grads.dq.reshape(third), grads.dk.reshape(third),
                                       grads.dv.reshape(third)};
      const Tensor want_dqkv =
          kernels::permute(kernels::concat(thirds, 0), std::vector<int>{1, 3, 0, 2, 4});
      for (int threads = 1; threads <= 2; ++threads) {
        SCOPED_TRACE(::testing::Message() << "causal " << causal << " dropout " << dropout << " "
                                          << threads << " threads");
        NumThreadsScope scope(threads);
        const kernels::AttentionResult r = kernels::attention_interleaved(qkv, options);
        EXPECT_EQ(r.out.to_floats(), kernels::permute(want.out, heads_first).to_floats());
        EXPECT_EQ(r.lse.to_floats(), want.lse.to_floats());
        const Tensor dqkv =
            kernels::attention_interleaved_backward(dout, qkv, r.out, r.lse, options);
        EXPECT_EQ(dqkv.to_floats(), want_dqkv.to_floats());
      }
    }
  }
}

// The groups' scratch (scores, probabilities) is workspace on every thread
// that runs a group: the activations grow by the output and its
// log-sum-exp only.
TEST(Attention, InterleavedScratchIsWorkspaceOnEveryThread) {
  const Tensor qkv = in(Shape{9, 128, 3, 4, 8}, 92, DType::f32);
  NumThreadsScope threads(2);
  Allocator& memory = allocator_for(cpu_device());
  const int64_t before = memory.stats().current(MemoryCategory::activations);
  memory.reset_peaks();
  const kernels::AttentionResult r = kernels::attention_interleaved(qkv);
  const int64_t grown = memory.stats().peak(MemoryCategory::activations) - before;
  EXPECT_LE(grown, r.out.nbytes() + r.lse.nbytes() + 1024);
}

// Under another replica's device scope, the scratch comes from qkv's
// device's allocator, as the results do.
TEST(Attention, InterleavedScratchIsOnTheInputsDevice) {
  const Tensor qkv = in(Shape{9, 128, 3, 4, 8}, 93, DType::f32);
  Allocator& other = allocator_for(cpu_device(1));
  other.reset_peaks();
  const int64_t before = other.stats().peak(MemoryCategory::workspace);
  DeviceScope scope(cpu_device(1));
  const kernels::AttentionResult r = kernels::attention_interleaved(qkv);
  const Tensor dout = in(r.out.shape(), 94, DType::f32);
  const Tensor dqkv = kernels::attention_interleaved_backward(dout, qkv, r.out, r.lse);
  EXPECT_EQ(other.stats().peak(MemoryCategory::workspace), before);
  EXPECT_EQ(dqkv.device(), qkv.device());
}

// At long sequences a group of the scratch's size holds one head; with
// more threads attention() takes a head per thread at once, with the same
// bits forward and backward.
TEST(Attention, LongSequencesGiveTheSameBitsOnAnyThreadCount) {
  if (!kernels::detail::has_avx512())
    GTEST_SKIP() << "the groups grow with threads on AVX-512 only";
  const Shape s{1, 3, 512, 16};
  ASSERT_EQ(kernels::attention_heads_per_group(3, 512, 512), 1);
  for (const DType d : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(d));
    const Tensor q = in(s, 95, d), k = in(s, 96, d), v = in(s, 97, d), dout = in(s, 98, d);
    std::vector<float> by_threads[4];
    for (int threads = 1; threads <= 4; ++threads) {
      NumThreadsScope scope(threads);
      const kernels::AttentionResult r = kernels::attention(q, k, v);
      const kernels::AttentionGrads g = kernels::attention_backward(dout, q, k, v, r.out, r.lse);
      for (const Tensor& t : {r.out, r.lse, g.dq, g.dk, g.dv}) {
        const std::vector<float> values = t.to_floats();
        by_threads[threads - 1].insert(by_threads[threads - 1].end(), values.begin(), values.end());
      }
    }
    for (int t = 1; t < 4; ++t) EXPECT_EQ(by_threads[0], by_threads[t]) << t + 1 << " threads";
  }
}

// A head of no width is refused, not given an uninitialised log-sum-exp.
TEST(Attention, HeadsOfNoWidthAreErrors) {
  const Tensor q = Tensor::zeros(Shape{1, 2, 4, 0});
  EXPECT_THROW(kernels::attention(q, q, q), ShapeError);
  EXPECT_THROW(kernels::attention_interleaved(Tensor::zeros(Shape{1, 4, 3, 2, 0})), ShapeError);
  // Empty batches stay fine.
  const Tensor none = Tensor::zeros(Shape{0, 2, 4, 8});
  EXPECT_EQ(kernels::attention(none, none, none).out.numel(), 0);
}

}  // namespace
}  // namespace tandem
