// Rows for layout copies (permute, slice, split, concat), softmax and attention.
#include <algorithm>
#include <string>

#include "support/op_rows.h"
#include "support/reference.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/error.h"
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

std::string attention_name(const AttentionShape& a) {
  return tandem::detail::concat("B", a.B, " H", a.H, " T", a.T, " S", a.S, " D", a.D,
                                a.causal ? " causal" : " full", a.dropout > 0 ? " dropout" : "");
}

void add_attention_rows(std::vector<OpCase>& rows) {
  // Small cases (their written-out gradients checked against central
  // differences) and the shapes the GPU comparisons used: a longer key
  // than query sequence, 33 positions of 32 features with dropout, one;
  // gpt's heads (128 positions of 32 features) over two groups of heads.
  const AttentionShape cases[] = {
      {.B = 2, .H = 3, .T = 9, .S = 9, .D = 8},
      {.B = 2, .H = 3, .T = 9, .S = 9, .D = 8, .causal = false},
      {.B = 2, .H = 3, .T = 9, .S = 13, .D = 8, .causal = false},
      {.B = 2, .H = 3, .T = 9, .S = 9, .D = 8, .dropout = 0.25},
      {.B = 2, .H = 3, .T = 9, .S = 13, .D = 8, .causal = false, .dropout = 0.3},
      {.B = 2, .H = 3, .T = 17, .S = 17, .D = 8},
      {.B = 1, .H = 2, .T = 5, .S = 9, .D = 16, .causal = false},
      {.B = 2, .H = 2, .T = 33, .S = 33, .D = 32, .dropout = 0.2},
      {.B = 1, .H = 1, .T = 1, .S = 1, .D = 4},
      {.B = 2, .H = 4, .T = 128, .S = 128, .D = 32}};
  for (const AttentionShape& a : cases) {
    const Shape qs{a.B, a.H, a.T, a.D}, ks{a.B, a.H, a.S, a.D};
    rows.push_back(
        {.name = "attention " + attention_name(a),
         .kernels = {"attention", "attention_backward"},
         .inputs = {uniform(qs), uniform(ks), uniform(ks)},
         .run =
             [=](const auto& in) {
               Generator generator(a.seed);
               return attention(
                   in[0], in[1], in[2],
                   {.causal = a.causal, .dropout = static_cast<float>(a.dropout), .training = true},
                   &generator);
             },
         .reference = [=](const auto& in) { return attention_reference(in[0], in[1], in[2], a); },
         .low_precision = {DType::bf16},
         .gradient_reference =
             [=](const auto& in, const Doubles& w) {
               return attention_gradient_reference(in[0], in[1], in[2], a, w);
             }});
  }
  // q, k, v packed as (3, B, H, T, D), one gradient tensor for the three.
  const AttentionShape packed{.B = 2, .H = 2, .T = 5, .S = 5, .D = 4, .seed = 0};
  const auto thirds = [](const Doubles& all) {
    const size_t n = all.size() / 3;
    return std::vector<Doubles>{Doubles(all.begin(), all.begin() + n),
                                Doubles(all.begin() + n, all.begin() + 2 * n),
                                Doubles(all.begin() + 2 * n, all.end())};
  };
  rows.push_back({.name = "attention_packed causal",
                  .kernels = {"attention", "attention_backward_into"},
                  .inputs = {uniform(Shape{3, 2, 2, 5, 4})},
                  .run = [](const auto& in) { return attention_packed(in[0]); },
                  .reference =
                      [=](const auto& in) {
                        const std::vector<Doubles> x = thirds(in[0]);
                        return attention_reference(x[0], x[1], x[2], packed);
                      },
                  .low_precision = {DType::bf16},
                  .gradient_reference =
                      [=](const auto& in, const Doubles& w) {
                        const std::vector<Doubles> x = thirds(in[0]);
                        const std::vector<Doubles> g =
                            attention_gradient_reference(x[0], x[1], x[2], packed, w);
                        Doubles all = g[0];
                        all.insert(all.end(), g[1].begin(), g[1].end());
                        all.insert(all.end(), g[2].begin(), g[2].end());
                        return std::vector<Doubles>{all};
                      }});
}

// An interleaved (B, T, 3, H, D) tensor's part `part` as (B, H, T, D), and
// back: the reference works on attention()'s layout.
Doubles heads_of(const Doubles& x, const AttentionShape& a, int64_t parts, int64_t part) {
  Doubles y(static_cast<size_t>(a.B * a.H * a.T * a.D));
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t t = 0; t < a.T; ++t)
      for (int64_t h = 0; h < a.H; ++h)
        for (int64_t d = 0; d < a.D; ++d)
          y[static_cast<size_t>(((b * a.H + h) * a.T + t) * a.D + d)] =
              x[static_cast<size_t>((((b * a.T + t) * parts + part) * a.H + h) * a.D + d)];
  return y;
}

void put_heads(const Doubles& y, const AttentionShape& a, int64_t parts, int64_t part, Doubles& x) {
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t t = 0; t < a.T; ++t)
      for (int64_t h = 0; h < a.H; ++h)
        for (int64_t d = 0; d < a.D; ++d)
          x[static_cast<size_t>((((b * a.T + t) * parts + part) * a.H + h) * a.D + d)] =
              y[static_cast<size_t>(((b * a.H + h) * a.T + t) * a.D + d)];
}

// q, k, v interleaved per position, the output (B, T, H, D): causal, with
// dropout (also at sizes the bf16 engines' products take), and gpt's head
// shape over two groups of heads.
void add_interleaved_attention_rows(std::vector<OpCase>& rows) {
  const AttentionShape cases[] = {{.B = 2, .H = 3, .T = 9, .S = 9, .D = 8},
                                  {.B = 2, .H = 2, .T = 33, .S = 33, .D = 32, .dropout = 0.2},
                                  {.B = 2, .H = 2, .T = 64, .S = 64, .D = 32, .dropout = 0.2},
                                  {.B = 2, .H = 4, .T = 128, .S = 128, .D = 32}};
  for (const AttentionShape& a : cases) {
    const auto out_of = [a](const Doubles& heads) {
      Doubles y(heads.size());
      put_heads(heads, a, 1, 0, y);
      return y;
    };
    rows.push_back(
        {.name = "attention_interleaved " + attention_name(a),
         .kernels = {"attention_interleaved", "attention_interleaved_backward"},
         .inputs = {uniform(Shape{a.B, a.T, 3, a.H, a.D})},
         .run =
             [=](const auto& in) {
               Generator generator(a.seed);
               return attention_interleaved(
                   in[0], {.dropout = static_cast<float>(a.dropout), .training = true}, &generator);
             },
         .reference =
             [=](const auto& in) {
               return out_of(attention_reference(heads_of(in[0], a, 3, 0), heads_of(in[0], a, 3, 1),
                                                 heads_of(in[0], a, 3, 2), a));
             },
         .low_precision = {DType::bf16},
         .gradient_reference =
             [=](const auto& in, const Doubles& w) {
               const std::vector<Doubles> g =
                   attention_gradient_reference(heads_of(in[0], a, 3, 0), heads_of(in[0], a, 3, 1),
                                                heads_of(in[0], a, 3, 2), a, heads_of(w, a, 1, 0));
               Doubles all(in[0].size());
               for (int64_t part = 0; part < 3; ++part)
                 put_heads(g[static_cast<size_t>(part)], a, 3, part, all);
               return std::vector<Doubles>{all};
             }});
  }
}

}  // namespace

void add_layout_rows(std::vector<OpCase>& rows) {
  add_copy_rows(rows);
  add_softmax_rows(rows);
  add_attention_rows(rows);
  add_interleaved_attention_rows(rows);
}

}  // namespace tandem::testing
