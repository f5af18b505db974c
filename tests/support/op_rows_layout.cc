// Rows for layout copies (permute, slice, split, concat), softmax and attention.
#include <algorithm>
#include <string>

#include "support/op_rows.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/random.h"

namespace tandem::testing {
namespace {

const Shape p4{2, 3, 4, 5};

void add_copy_rows(std::vector<OpCase>& rows) {
  rows.push_back({.name = "permute (2,0,3,1)",
                  .kernels = {"permute"},
                  .inputs = {uniform(p4)},
                  .run =
                      [](const auto& in) {
                        return permute(in[0], {2, 0, 3, 1});
                      },
                  .reference =
                      [](const auto& in) {
                        Doubles y;
                        for (int64_t a = 0; a < 4; ++a)
                          for (int64_t b = 0; b < 2; ++b)
                            for (int64_t e = 0; e < 5; ++e)
                              for (int64_t f = 0; f < 3; ++f)
                                y.push_back(in[0][offset(p4, {b, f, a, e})]);
                        return y;
                      }});
  rows.push_back({.name = "transpose 1 3",
                  .kernels = {"permute"},
                  .inputs = {uniform(p4)},
                  .run = [](const auto& in) { return transpose(in[0], 1, -1); },
                  .reference =
                      [](const auto& in) {
                        Doubles y;
                        for (int64_t a = 0; a < 2; ++a)
                          for (int64_t b = 0; b < 5; ++b)
                            for (int64_t e = 0; e < 4; ++e)
                              for (int64_t f = 0; f < 3; ++f)
                                y.push_back(in[0][offset(p4, {a, f, e, b})]);
                        return y;
                      }});
  rows.push_back({.name = "slice axis 2 [1, 3)",
                  .kernels = {"slice", "unslice"},
                  .inputs = {uniform(p4)},
                  .run = [](const auto& in) { return slice(in[0], 2, 1, 3); },
                  .reference =
                      [](const auto& in) {
                        Doubles y;
                        for (int64_t a = 0; a < 2; ++a)
                          for (int64_t b = 0; b < 3; ++b)
                            for (int64_t e = 1; e < 3; ++e)
                              for (int64_t f = 0; f < 5; ++f)
                                y.push_back(in[0][offset(p4, {a, b, e, f})]);
                        return y;
                      }});
  // The two parts of a split, concatenated back in the other order, so that
  // both parts' gradients flow through one output.
  rows.push_back({.name = "split axis 3 {2, 3} and concat",
                  .kernels = {"slice", "unslice", "concat"},
                  .inputs = {uniform(p4)},
                  .run =
                      [](const auto& in) {
                        const std::vector<Variable> parts = split(in[0], 3, {2, 3});
                        return concat({parts[1], parts[0]}, -1);
                      },
                  .reference =
                      [](const auto& in) {
                        Doubles y;
                        for (size_t r = 0; r < in[0].size(); r += 5)
                          for (size_t j : {2, 3, 4, 0, 1}) y.push_back(in[0][r + j]);
                        return y;
                      }});
  rows.push_back({.name = "concat axis 1",
                  .kernels = {"concat", "slice"},
                  .inputs = {uniform(p4), uniform(Shape{2, 1, 4, 5})},
                  .run =
                      [](const auto& in) {
                        return concat({in[0], in[1]}, 1);
                      },
                  .reference =
                      [](const auto& in) {
                        Doubles y;
                        for (size_t a = 0; a < 2; ++a) {
                          y.insert(y.end(), in[0].begin() + a * 60, in[0].begin() + (a + 1) * 60);
                          y.insert(y.end(), in[1].begin() + a * 20, in[1].begin() + (a + 1) * 20);
                        }
                        return y;
                      }});
  // One input used twice: its gradients add up.
  rows.push_back({.name = "concat an input with itself",
                  .kernels = {"concat", "slice"},
                  .inputs = {uniform(Shape{3, 4})},
                  .run =
                      [](const auto& in) {
                        return concat({in[0], in[0]}, -1);
                      },
                  .reference =
                      [](const auto& in) {
                        Doubles y;
                        for (size_t r = 0; r < 12; r += 4)
                          for (int copy = 0; copy < 2; ++copy)
                            y.insert(y.end(), in[0].begin() + r, in[0].begin() + r + 4);
                        return y;
                      }});
  rows.push_back({.name = "reshape and flatten",
                  .kernels = {},
                  .inputs = {uniform(Shape{3, 7})},
                  .run =
                      [](const auto& in) {
                        return flatten(reshape(in[0], Shape{7, 3, 1}));
                      },
                  .reference = [](const auto& in) { return in[0]; }});
  rows.push_back({.name = "cast to bf16 and back",
                  .kernels = {},
                  .inputs = {uniform(Shape{3, 7})},
                  .run = [](const auto& in) { return cast(cast(in[0], DType::bf16), DType::f32); },
                  .reference = [](const auto& in) { return in[0]; },
                  .low_precision = {DType::bf16},
                  // Rounding to bf16 is the op: its error bound, not f32's.
                  .tolerance = 1.0 / 256});
}

Doubles softmax_of(const Doubles& x, size_t n, bool log) {
  return map_rows(x, n, [=](const double* in, double* out) {
    double m = -INFINITY, t = 0;
    for (size_t j = 0; j < n; ++j) m = std::max(m, in[j]);
    for (size_t j = 0; j < n; ++j) t += std::exp(in[j] - m);
    for (size_t j = 0; j < n; ++j) out[j] = log ? in[j] - m - std::log(t) : std::exp(in[j] - m) / t;
  });
}

// Up to 1,000 classes (the kernels' long-row paths); the differences
// re-evaluate one row at a time.
void add_softmax_rows(std::vector<OpCase>& rows) {
  for (const Shape& s : {Shape{1}, Shape{3, 17}, Shape{2, 3, 129}, Shape{3, 5, 1000}}) {
    const int64_t n = s.dim(s.rank() - 1);
    const auto row = static_cast<size_t>(n);
    // The backward sums a row of n products in f32.
    const double tolerance = 1e-6 * std::max(1.0, std::sqrt(static_cast<double>(n) / 100));
    rows.push_back({.name = "softmax " + s.to_string(),
                    .kernels = {"softmax", "softmax_backward"},
                    .inputs = {uniform(s, -8, 8)},
                    .run = [](const auto& in) { return softmax(in[0]); },
                    .reference = [=](const auto& in) { return softmax_of(in[0], row, false); },
                    .tolerance = tolerance,
                    .row_length = n});
    rows.push_back({.name = "log_softmax " + s.to_string(),
                    .kernels = {"log_softmax", "log_softmax_backward"},
                    .inputs = {uniform(s, -8, 8)},
                    .run = [](const auto& in) { return log_softmax(in[0]); },
                    .reference = [=](const auto& in) { return softmax_of(in[0], row, true); },
                    .tolerance = tolerance,
                    .row_length = n});
  }
}

// q (B, H, T, D), k and v (B, H, S, D); probabilities dropped as the kernel's
// documented rule says when p > 0.
Doubles attention_of(const Doubles& q, const Doubles& k, const Doubles& v, int64_t BH, int64_t T,
                     int64_t S, int64_t D, bool causal, double p, uint64_t seed) {
  Doubles out(static_cast<size_t>(BH * T * D), 0.0);
  const double scale = 1 / std::sqrt(static_cast<double>(D));
  const auto threshold = static_cast<uint64_t>(std::ldexp(p, 32));
  for (int64_t h = 0; h < BH; ++h)
    for (int64_t i = 0; i < T; ++i) {
      Doubles s(static_cast<size_t>(S), -INFINITY);
      double m = -INFINITY, total = 0;
      for (int64_t j = 0; j < S; ++j) {
        if (causal && j > i) continue;
        double dot = 0;
        for (int64_t c = 0; c < D; ++c) dot += q[(h * T + i) * D + c] * k[(h * S + j) * D + c];
        m = std::max(m, s[j] = dot * scale);
      }
      for (double& x : s) total += (x = std::exp(x - m));
      for (int64_t j = 0; j < S; ++j) {
        const auto position = static_cast<uint64_t>((h * T + i) * S + j);
        const double kept = p > 0 && random_bits_at(seed, position) < threshold ? 0 : 1 / (1 - p);
        for (int64_t c = 0; c < D; ++c)
          out[(h * T + i) * D + c] += s[j] / total * kept * v[(h * S + j) * D + c];
      }
    }
  return out;
}

void add_attention_rows(std::vector<OpCase>& rows) {
  struct Variant {
    bool causal;
    int64_t S;
    float dropout;
  };
  for (const Variant& a :
       {Variant{true, 9, 0.0f}, Variant{false, 9, 0.0f}, Variant{false, 13, 0.0f},
        Variant{true, 9, 0.25f}, Variant{false, 13, 0.3f}}) {
    const Shape qs{2, 3, 9, 8}, ks{2, 3, a.S, 8};
    constexpr uint64_t seed = 5;
    rows.push_back(
        {.name = std::string("attention ") + (a.causal ? "causal" : "full") +
                 " S=" + std::to_string(a.S) + (a.dropout > 0 ? " dropout" : ""),
         .kernels = {"attention", "attention_backward"},
         .inputs = {uniform(qs), uniform(ks), uniform(ks)},
         .run =
             [=](const auto& in) {
               Generator generator(seed);
               return attention(in[0], in[1], in[2],
                                {.causal = a.causal, .dropout = a.dropout, .training = true},
                                &generator);
             },
         .reference =
             [=](const auto& in) {
               return attention_of(in[0], in[1], in[2], 6, 9, a.S, 8, a.causal, a.dropout, seed);
             },
         .low_precision = {DType::bf16}});
  }
  // q, k, v packed as (3, B, H, T, D), one gradient tensor for the three.
  const Shape packed{3, 2, 2, 5, 4};
  rows.push_back({.name = "attention_packed causal",
                  .kernels = {"attention", "attention_backward", "concat"},
                  .inputs = {uniform(packed)},
                  .run = [](const auto& in) { return attention_packed(in[0]); },
                  .reference =
                      [](const auto& in) {
                        const size_t n = in[0].size() / 3;
                        const Doubles q(in[0].begin(), in[0].begin() + n),
                            k(in[0].begin() + n, in[0].begin() + 2 * n),
                            v(in[0].begin() + 2 * n, in[0].end());
                        return attention_of(q, k, v, 4, 5, 5, 4, true, 0, 0);
                      },
                  .low_precision = {DType::bf16}});
}

}  // namespace

void add_layout_rows(std::vector<OpCase>& rows) {
  add_copy_rows(rows);
  add_softmax_rows(rows);
  add_attention_rows(rows);
}

}  // namespace tandem::testing
