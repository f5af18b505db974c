// The Transformer and ResNet kernels against naive double references, f32 and
// bf16 (f16 where the kernel takes it), one table row per operator and
// shape. Backward passes are checked by finite differences in
// tests/autograd/gradcheck_test.cc; attention is also checked here against
// a composition of the primitive ops.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "support/gradcheck.h"
#include "support/reference.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/kernels/activation.h"
#include "tandem/kernels/attention.h"
#include "tandem/kernels/layout.h"
#include "tandem/kernels/matmul.h"
#include "tandem/kernels/normalization.h"
#include "tandem/kernels/pool.h"
#include "tandem/kernels/softmax.h"

namespace tandem {
namespace {

using testing::expect_close;
using testing::random_tensor;
using testing::to_doubles;

// Index helpers over row-major shapes.
int64_t at(const Shape& s, std::initializer_list<int64_t> index) {
  int64_t offset = 0, i = 0;
  for (int64_t v : index) offset = offset * s.dim(static_cast<int>(i++)) + v;
  return offset;
}

std::vector<double> bmm_reference(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const int r = a.rank();
  const int64_t M = ta ? a.dim(r - 1) : a.dim(r - 2), K = ta ? a.dim(r - 2) : a.dim(r - 1);
  const int64_t N = tb ? b.dim(b.rank() - 2) : b.dim(b.rank() - 1);
  const int64_t batch = a.numel() / (M * K);
  const bool shared = b.rank() == 2;
  const std::vector<double> av = to_doubles(a), bv = to_doubles(b);
  std::vector<double> out(static_cast<size_t>(batch * M * N));
  for (int64_t e = 0; e < batch; ++e) {
    const double* pa = av.data() + e * M * K;
    const double* pb = bv.data() + (shared ? 0 : e * K * N);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k)
          acc += pa[ta ? k * M + m : m * K + k] * pb[tb ? n * K + k : k * N + n];
        out[static_cast<size_t>((e * M + m) * N + n)] = acc;
      }
  }
  return out;
}

std::vector<double> attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                        bool causal) {
  const int64_t B = q.dim(0), H = q.dim(1), T = q.dim(2), S = k.dim(2), D = q.dim(3);
  const std::vector<double> qv = to_doubles(q), kv = to_doubles(k), vv = to_doubles(v);
  std::vector<double> out(static_cast<size_t>(B * H * T * D), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < T; ++i) {
      std::vector<double> s(static_cast<size_t>(S), -INFINITY);
      double m = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        if (causal && j > i) continue;
        double dot = 0;
        for (int64_t c = 0; c < D; ++c) dot += qv[(bh * T + i) * D + c] * kv[(bh * S + j) * D + c];
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      double total = 0;
      for (double& x : s) total += (x = std::exp(x - m));
      for (int64_t j = 0; j < S; ++j)
        for (int64_t c = 0; c < D; ++c)
          out[(bh * T + i) * D + c] += s[j] / total * vv[(bh * S + j) * D + c];
    }
  return out;
}

struct OpCase {
  std::string name;
  std::function<Tensor(DType)> run;                     // the kernel on inputs of that dtype
  std::function<std::vector<double>(DType)> reference;  // on the same (rounded) inputs
  bool f16 = true;                                      // the kernel takes f16
  double atol = 1e-5;
};

// Inputs rounded to the dtype, so that kernel and reference see the same values.
Tensor in(const Shape& s, uint64_t seed, DType d, float lo = -2, float hi = 2) {
  return random_tensor(s, lo, hi, seed).to(d);
}

std::vector<OpCase> cases() {
  std::vector<OpCase> c;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool shared : {false, true}) {
        const Shape as = ta ? Shape{2, 3, 7, 5} : Shape{2, 3, 5, 7};
        const Shape bs = shared ? (tb ? Shape{9, 7} : Shape{7, 9})
                                : (tb ? Shape{2, 3, 9, 7} : Shape{2, 3, 7, 9});
        c.push_back({"batched_matmul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                         (shared ? " shared" : ""),
                     [=](DType d) {
                       return kernels::batched_matmul(in(as, 1, d), in(bs, 2, d),
                                                      {.transpose_a = ta, .transpose_b = tb});
                     },
                     [=](DType d) { return bmm_reference(in(as, 1, d), in(bs, 2, d), ta, tb); },
                     false, 1e-4});
      }
  for (const Shape& s : {Shape{1}, Shape{3, 17}, Shape{2, 3, 129}}) {
    c.push_back({"softmax " + s.to_string(), [=](DType d) { return kernels::softmax(in(s, 3, d)); },
                 [=](DType d) {
                   std::vector<double> x = to_doubles(in(s, 3, d));
                   const int64_t n = s.dim(s.rank() - 1);
                   for (size_t r = 0; r < x.size(); r += n) {
                     double m = -INFINITY, t = 0;
                     for (int64_t j = 0; j < n; ++j) m = std::max(m, x[r + j]);
                     for (int64_t j = 0; j < n; ++j) t += std::exp(x[r + j] - m);
                     for (int64_t j = 0; j < n; ++j) x[r + j] = std::exp(x[r + j] - m) / t;
                   }
                   return x;
                 }});
    c.push_back({"log_softmax " + s.to_string(),
                 [=](DType d) { return kernels::log_softmax(in(s, 4, d)); },
                 [=](DType d) {
                   std::vector<double> x = to_doubles(in(s, 4, d));
                   const int64_t n = s.dim(s.rank() - 1);
                   for (size_t r = 0; r < x.size(); r += n) {
                     double m = -INFINITY, t = 0;
                     for (int64_t j = 0; j < n; ++j) m = std::max(m, x[r + j]);
                     for (int64_t j = 0; j < n; ++j) t += std::exp(x[r + j] - m);
                     for (int64_t j = 0; j < n; ++j) x[r + j] = x[r + j] - m - std::log(t);
                   }
                   return x;
                 },
                 true, 1e-2});
  }
  const Shape p4{2, 3, 4, 5};
  c.push_back({"permute (2,0,3,1)",
               [=](DType d) {
                 return kernels::permute(in(p4, 5, d), std::vector<int>{2, 0, 3, 1});
               },
               [=](DType d) {
                 const std::vector<double> x = to_doubles(in(p4, 5, d));
                 std::vector<double> y;
                 for (int64_t a = 0; a < 4; ++a)
                   for (int64_t b = 0; b < 2; ++b)
                     for (int64_t e = 0; e < 5; ++e)
                       for (int64_t f = 0; f < 3; ++f) y.push_back(x[at(p4, {b, f, a, e})]);
                 return y;
               }});
  c.push_back({"slice axis 2 [1, 3)",
               [=](DType d) { return kernels::slice(in(p4, 6, d), 2, 1, 3); },
               [=](DType d) {
                 const std::vector<double> x = to_doubles(in(p4, 6, d));
                 std::vector<double> y;
                 for (int64_t a = 0; a < 2; ++a)
                   for (int64_t b = 0; b < 3; ++b)
                     for (int64_t e = 1; e < 3; ++e)
                       for (int64_t f = 0; f < 5; ++f) y.push_back(x[at(p4, {a, b, e, f})]);
                 return y;
               }});
  c.push_back({"concat axis 1",
               [=](DType d) {
                 const std::vector<Tensor> parts{in(p4, 7, d), in(Shape{2, 1, 4, 5}, 8, d)};
                 return kernels::concat(parts, 1);
               },
               [=](DType d) {
                 const std::vector<double> x = to_doubles(in(p4, 7, d)),
                                           z = to_doubles(in(Shape{2, 1, 4, 5}, 8, d));
                 std::vector<double> y;
                 for (int64_t a = 0; a < 2; ++a) {
                   y.insert(y.end(), x.begin() + a * 60, x.begin() + (a + 1) * 60);
                   y.insert(y.end(), z.begin() + a * 20, z.begin() + (a + 1) * 20);
                 }
                 return y;
               }});
  const Shape img{2, 5, 7, 3};
  const kernels::Pool2dGeometry pg{
      .kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
  c.push_back({"avg_pool2d k3x2 s2 p1",
               [=](DType d) { return kernels::avg_pool2d(in(img, 9, d), pg); },
               [=](DType d) {
                 const std::vector<double> x = to_doubles(in(img, 9, d));
                 const Shape ys = kernels::pool2d_output_shape(img, pg);
                 std::vector<double> y;
                 for (int64_t n = 0; n < 2; ++n)
                   for (int64_t oh = 0; oh < ys[1]; ++oh)
                     for (int64_t ow = 0; ow < ys[2]; ++ow)
                       for (int64_t ch = 0; ch < 3; ++ch) {
                         double acc = 0;
                         for (int64_t i = 0; i < 3; ++i)
                           for (int64_t j = 0; j < 2; ++j) {
                             const int64_t h = oh * 2 - 1 + i, w = ow * 2 - 1 + j;
                             if (h >= 0 && h < 5 && w >= 0 && w < 7)
                               acc += x[at(img, {n, h, w, ch})];
                           }
                         y.push_back(acc / 6);
                       }
                 return y;
               }});
  c.push_back({"global_avg_pool", [=](DType d) { return kernels::global_avg_pool(in(img, 10, d)); },
               [=](DType d) {
                 const std::vector<double> x = to_doubles(in(img, 10, d));
                 std::vector<double> y(6, 0.0);
                 for (int64_t n = 0; n < 2; ++n)
                   for (int64_t p = 0; p < 35; ++p)
                     for (int64_t ch = 0; ch < 3; ++ch)
                       y[n * 3 + ch] += x[(n * 35 + p) * 3 + ch] / 35;
                 return y;
               }});
  const Shape pw{7, 13};
  c.push_back({"silu", [=](DType d) { return kernels::silu(in(pw, 11, d, -6, 6)); },
               [=](DType d) {
                 std::vector<double> x = to_doubles(in(pw, 11, d, -6, 6));
                 for (double& v : x) v = v / (1 + std::exp(-v));
                 return x;
               }});
  c.push_back({"gelu_tanh", [=](DType d) { return kernels::gelu_tanh(in(pw, 12, d, -6, 6)); },
               [=](DType d) {
                 std::vector<double> x = to_doubles(in(pw, 12, d, -6, 6));
                 for (double& v : x)
                   v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
                 return x;
               }});
  c.push_back({"rms_norm",
               [=](DType d) {
                 return kernels::rms_norm(in(Shape{5, 33}, 13, d),
                                          random_tensor(Shape{33}, 0.5, 1.5, 14), 1e-5f)
                     .y;
               },
               [=](DType d) {
                 std::vector<double> x = to_doubles(in(Shape{5, 33}, 13, d));
                 const std::vector<double> g = to_doubles(random_tensor(Shape{33}, 0.5, 1.5, 14));
                 for (size_t r = 0; r < x.size(); r += 33) {
                   double sq = 0;
                   for (size_t j = 0; j < 33; ++j) sq += x[r + j] * x[r + j];
                   const double s = 1 / std::sqrt(sq / 33 + 1e-5);
                   for (size_t j = 0; j < 33; ++j) x[r + j] *= s * g[j];
                 }
                 return x;
               }});
  for (bool causal : {true, false})
    for (int64_t S : {int64_t{9}, int64_t{13}}) {
      if (causal && S != 9) continue;
      const Shape qs{2, 3, 9, 8}, ks{2, 3, S, 8};
      c.push_back(
          {std::string("attention ") + (causal ? "causal" : "full") + " S=" + std::to_string(S),
           [=](DType d) {
             return kernels::attention(in(qs, 15, d), in(ks, 16, d), in(ks, 17, d),
                                       {.causal = causal})
                 .out;
           },
           [=](DType d) {
             return attention_reference(in(qs, 15, d), in(ks, 16, d), in(ks, 17, d), causal);
           },
           false, 1e-4});
    }
  return c;
}

class TransformerOps : public ::testing::TestWithParam<DType> {};

TEST_P(TransformerOps, ForwardMatchesTheNaiveReference) {
  const DType d = GetParam();
  for (const OpCase& op : cases()) {
    if (d == DType::f16 && !op.f16) continue;
    SCOPED_TRACE(op.name);
    const Tensor y = op.run(d);
    // bf16/f16 results are rounded once (and matmul inputs were already rounded).
    expect_close(to_doubles(y), op.reference(d), op.atol + (d == DType::f32 ? 0 : 2e-2),
                 2 * testing::dtype_rtol(d), op.name.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, TransformerOps,
                         ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Attention against softmax(q k^T / sqrt(D) + mask) v built from the primitive
// ops, forward and every gradient, also with more keys than queries and
// more queries than keys.
TEST(Attention, MatchesTheCompositionOfPrimitiveOps) {
  for (DType d : {DType::f32, DType::bf16}) {
    for (const auto& [T, S] :
         std::vector<std::pair<int64_t, int64_t>>{{11, 11}, {150, 150}, {100, 150}, {150, 100}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(d) << " T=" << T << " S=" << S);
      auto make = [&](const Shape& s, uint64_t seed) { return Variable(in(s, seed, d), true); };
      Variable q = make(Shape{2, 2, T, 8}, 20), k = make(Shape{2, 2, S, 8}, 21),
               v = make(Shape{2, 2, S, 8}, 22);
      const Tensor dy = random_tensor(Shape{2, 2, T, 8}, -1, 1, 23).to(d);
      // The causal mask as an additive (T, S) tensor, broadcast over (B, H).
      std::vector<float> mask(static_cast<size_t>(T * S));
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < S; ++j)
          mask[static_cast<size_t>(i * S + j)] = j > i ? -1e30f : 0.0f;
      const Variable additive(Tensor::from_floats(Shape{T, S}, mask));
      const Variable scores =
          add(scale(batched_matmul(cast(q, DType::f32), cast(k, DType::f32), false, true),
                    1.0f / std::sqrt(8.0f)),
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
        for (int64_t j = T; j < S; ++j) EXPECT_EQ(dk[static_cast<size_t>(j * 8)], 0.0f);
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

// Backward in bf16 against backward in f32 on the same (bf16-rounded)
// inputs: every gradient within bf16's precision as a whole.
TEST(TransformerOpsBackward, Bf16MatchesF32) {
  using Fn = std::function<Variable(const std::vector<Variable>&)>;
  struct Case {
    const char* name;
    std::vector<Shape> shapes;
    Fn f;
  };
  const std::vector<Case> table{
      {"batched_matmul",
       {Shape{2, 3, 5, 7}, Shape{2, 3, 9, 7}},
       [](const auto& x) { return batched_matmul(x[0], x[1], false, true); }},
      {"softmax", {Shape{3, 17}}, [](const auto& x) { return softmax(x[0]); }},
      {"log_softmax", {Shape{3, 17}}, [](const auto& x) { return log_softmax(x[0]); }},
      {"permute",
       {Shape{2, 3, 4, 5}},
       [](const auto& x) {
         return permute(x[0], {0, 2, 1, 3});
       }},
      {"concat+slice",
       {Shape{2, 3, 4}, Shape{2, 2, 4}},
       [](const auto& x) {
         return slice(concat({x[0], x[1]}, 1), 1, 1, 4);
       }},
      {"avg_pool2d", {Shape{2, 6, 6, 3}}, [](const auto& x) { return avg_pool2d(x[0], {}); }},
      {"global_avg_pool", {Shape{2, 6, 6, 3}}, [](const auto& x) { return global_avg_pool(x[0]); }},
      {"silu", {Shape{7, 13}}, [](const auto& x) { return silu(x[0]); }},
      {"gelu_tanh", {Shape{7, 13}}, [](const auto& x) { return gelu_tanh(x[0]); }},
      {"attention",
       {Shape{2, 2, 9, 8}, Shape{2, 2, 9, 8}, Shape{2, 2, 9, 8}},
       [](const auto& x) { return attention(x[0], x[1], x[2]); }},
  };
  for (const Case& c : table) {
    SCOPED_TRACE(c.name);
    std::vector<std::vector<float>> grads[2];
    for (int pass = 0; pass < 2; ++pass) {
      const DType d = pass == 0 ? DType::f32 : DType::bf16;
      std::vector<Variable> inputs;
      uint64_t seed = 60;
      for (const Shape& shape : c.shapes)
        inputs.emplace_back(in(shape, seed++, DType::bf16).to(d), true);
      const Variable y = c.f(inputs);
      y.backward(random_tensor(y.shape(), -1, 1, 70).to(DType::bf16).to(d));
      for (const Variable& v : inputs) grads[pass].push_back(v.grad().to_floats());
    }
    for (size_t i = 0; i < grads[0].size(); ++i)
      EXPECT_LT(testing::relative_error(grads[0][i], grads[1][i]), 2e-2) << "input " << i;
  }
}

TEST(Attention, DropoutKeepsTheExpectationAndDependsOnlyOnTheSeed) {
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
  // Bounded scratch: 8 MiB of f32 scores, at least one head.
  EXPECT_EQ(kernels::attention_heads_per_group(256, 128, 128), 128);
  EXPECT_EQ(kernels::attention_heads_per_group(4, 128, 128), 4);
  EXPECT_EQ(kernels::attention_heads_per_group(8, 4096, 4096), 1);
  // Many groups give the same result as one.
  const Shape s{3, 1, 1500, 4};
  const Tensor q = random_tensor(s, -1, 1, 40), k = random_tensor(s, -1, 1, 41),
               v = random_tensor(s, -1, 1, 42);
  ASSERT_EQ(kernels::attention_heads_per_group(3, 1500, 1500), 1);
  expect_close(to_doubles(kernels::attention(q, k, v).out), attention_reference(q, k, v, true),
               1e-5, 1e-4, "attention over 3 groups");
}

}  // namespace
}  // namespace tandem
