// Rows for activations, arithmetic with broadcasting, unary functions,
// reductions and dropout.
#include <algorithm>
#include <string>

#include "support/op_rows.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/random.h"
#include "tandem/kernels/activation.h"
#include "tandem/kernels/layout.h"

namespace tandem::testing {
namespace {

using kernels::Activation;

// One element, a matrix, an image batch and more elements than one thread's share.
const Shape kElementwiseShapes[] = {Shape{1}, Shape{7, 13}, Shape{3, 5, 5, 2}, Shape{100003}};

void add_activation_rows(std::vector<OpCase>& rows) {
  struct Function {
    const char* name;
    Variable (*run)(const Variable&);
    double (*f)(double);
  };
  const Function functions[] = {
      {"relu", [](const Variable& x) { return relu(x); },
       [](double x) { return std::max(x, 0.0); }},
      {"gelu", [](const Variable& x) { return gelu(x); }, gelu_erf},
      {"gelu_tanh", [](const Variable& x) { return gelu_tanh(x); }, gelu_tanh_of},
      {"silu", [](const Variable& x) { return silu(x); }, silu_of},
  };
  for (const Function& fn : functions)
    for (const Shape& s : kElementwiseShapes) {
      const bool relu = std::string(fn.name) == "relu";
      rows.push_back({.name = std::string(fn.name) + " " + s.to_string(),
                      .kernels = {fn.name, std::string(fn.name) + "_backward"},
                      // relu's inputs stay off its kink.
                      .inputs = {relu ? distinct(s, 0.05) : uniform(s, -6, 6)},
                      .run = [run = fn.run](const auto& in) { return run(in[0]); },
                      .reference = [f = fn.f](const auto& in) { return map(in[0], f); },
                      .elementwise = true});
    }
  const Shape s{7, 13};
  // The by-name entry points the fused layers use, forward and backward.
  for (Activation a :
       {Activation::relu, Activation::gelu, Activation::gelu_tanh, Activation::silu}) {
    rows.push_back(
        {.name = "activate and activation_backward " + std::string(kernels::activation_name(a)),
         .kernels = {"activate", "activation_backward"},
         .inputs = {distinct(s, 0.05), fixed(s)},
         .run =
             [=](const auto& in) {
               const Tensor x = in[0].value();
               // relu's backward takes its output, the others their input.
               const Tensor saved = a == Activation::relu ? kernels::activate(a, x) : x;
               return Variable(kernels::concat(
                   std::vector<Tensor>{kernels::activate(a, x),
                                       kernels::activation_backward(a, in[1].value(), saved)},
                   0));
             },
         .reference =
             [=](const auto& in) {
               Doubles y(in[0].size() * 2);
               for (size_t i = 0; i < in[0].size(); ++i) {
                 const double x = in[0][i], h = 1e-6;
                 const auto f = [&](double v) { return activation_of(a, v); };
                 y[i] = f(x);
                 y[in[0].size() + i] = in[1][i] * (f(x + h) - f(x - h)) / (2 * h);
               }
               return y;
             },

         .gradient = false});
  }
}

// a (op) b with b broadcast along a's leading axes (b's shape is a suffix of a's, or
// has ones there).
template <typename F>
Doubles broadcast(const Doubles& a, const Doubles& b, F f) {
  Doubles y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = f(a[i], b[i % b.size()]);
  return y;
}

// A residual block's end: relu(a + b) fused, over shapes with and without
// a tail past 16 lanes; inputs kept off the kink (a at least 0.05 from 0
// and from each other, b within 0.02).
void add_add_relu_rows(std::vector<OpCase>& rows) {
  for (const Shape& s : {Shape{3, 5, 5, 2}, Shape{2, 7, 7, 16}, Shape{4099}}) {
    rows.push_back({.name = "add_relu " + s.to_string(),
                    .kernels = {"add_relu", "relu_backward"},
                    .inputs = {distinct(s, 0.05), uniform(s, -0.02, 0.02)},
                    .run = [](const auto& in) { return add_relu(in[0], in[1]); },
                    .reference =
                        [](const auto& in) {
                          Doubles y(in[0].size());
                          for (size_t i = 0; i < y.size(); ++i)
                            y[i] = std::max(in[0][i] + in[1][i], 0.0);
                          return y;
                        },
                    // Both operands get the output's gradient where the sum is positive.
                    .gradient_reference =
                        [](const auto& in, const Doubles& w) {
                          Doubles g(w.size());
                          for (size_t i = 0; i < g.size(); ++i)
                            g[i] = in[0][i] + in[1][i] > 0 ? w[i] : 0.0;
                          return std::vector<Doubles>{g, g};
                        }});
  }
}

void add_arithmetic_rows(std::vector<OpCase>& rows) {
  // The second operand: the same shape, trailing dimensions, a row, one element.
  const Shape s{4, 3, 5};
  for (const Shape& bs : {s, Shape{3, 5}, Shape{5}, Shape{1}}) {
    const std::string by = " by " + bs.to_string();
    rows.push_back({.name = "add" + by,
                    .kernels = {"add", "sum_to_shape"},
                    .inputs = {uniform(s), uniform(bs)},
                    .run = [](const auto& in) { return add(in[0], in[1]); },
                    .reference =
                        [](const auto& in) {
                          return broadcast(in[0], in[1], [](double a, double b) { return a + b; });
                        }});
    rows.push_back({.name = "sub" + by,
                    .kernels = {"add", "scale", "sum_to_shape"},
                    .inputs = {uniform(s), uniform(bs)},
                    .run = [](const auto& in) { return sub(in[0], in[1]); },
                    .reference =
                        [](const auto& in) {
                          return broadcast(in[0], in[1], [](double a, double b) { return a - b; });
                        }});
    rows.push_back({.name = "mul" + by,
                    .kernels = {"mul", "sum_to_shape"},
                    .inputs = {uniform(s), uniform(bs)},
                    .run = [](const auto& in) { return mul(in[0], in[1]); },
                    .reference =
                        [](const auto& in) {
                          return broadcast(in[0], in[1], [](double a, double b) { return a * b; });
                        }});
    rows.push_back({.name = "div" + by,
                    .kernels = {"mul", "unary", "unary_backward"},
                    .inputs = {uniform(s), uniform(bs, 0.5, 2)},
                    .run = [](const auto& in) { return div(in[0], in[1]); },
                    .reference =
                        [](const auto& in) {
                          return broadcast(in[0], in[1], [](double a, double b) { return a / b; });
                        },
                    .gpu = false});
  }
  rows.push_back(
      {.name = "scale",
       .kernels = {"scale"},
       .inputs = {uniform(s)},
       .run = [](const auto& in) { return scale(in[0], -1.75f); },
       .reference = [](const auto& in) { return map(in[0], [](double x) { return -1.75 * x; }); }});
}

void add_unary_rows(std::vector<OpCase>& rows) {
  const Shape s{6, 11};
  struct Unary {
    const char* name;
    Variable (*run)(const Variable&);
    double (*f)(double);
    double low, high;
  };
  const Unary ops[] = {
      {"exp", [](const Variable& x) { return exp(x); }, [](double x) { return std::exp(x); }, -3,
       3},
      {"log", [](const Variable& x) { return log(x); }, [](double x) { return std::log(x); }, 0.2,
       4},
      {"sigmoid", [](const Variable& x) { return sigmoid(x); },
       [](double x) { return 1 / (1 + std::exp(-x)); }, -6, 6},
      {"tanh", [](const Variable& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -4,
       4},
  };
  for (const Unary& u : ops)
    for (const Shape& shape : {s, Shape{100003}})
      rows.push_back({.name = std::string(u.name) + " " + shape.to_string(),
                      .kernels = {"unary", "unary_backward"},
                      .inputs = {uniform(shape, u.low, u.high)},
                      .run = [run = u.run](const auto& in) { return run(in[0]); },
                      .reference = [f = u.f](const auto& in) { return map(in[0], f); },
                      .gpu = false,
                      .elementwise = true});
}

Doubles total(const Doubles& x) {
  double t = 0;
  for (double v : x) t += v;
  return {t};
}

void add_reduction_rows(std::vector<OpCase>& rows) {
  const Shape s{4, 3, 5};
  // Whole-tensor sums over 1 to 100,003 elements (the GPU's multi-block
  // path); their gradient is the output's weight everywhere.
  for (const Shape& shape : {s, Shape{1}, Shape{255}, Shape{257}, Shape{100003}}) {
    const auto n = static_cast<double>(shape.numel());
    const auto spread = [=](const auto& in, const Doubles& w, double by) {
      return std::vector<Doubles>{Doubles(in[0].size(), w[0] / by)};
    };
    rows.push_back({.name = "sum " + shape.to_string(),
                    .kernels = {"sum"},
                    .inputs = {uniform(shape)},
                    .run = [](const auto& in) { return sum(in[0]); },
                    .reference = [](const auto& in) { return total(in[0]); },
                    .gradient_reference = [=](const auto& in,
                                              const Doubles& w) { return spread(in, w, 1.0); }});
    rows.push_back(
        {.name = "mean " + shape.to_string(),
         .kernels = {"mean"},
         .inputs = {uniform(shape)},
         .run = [](const auto& in) { return mean(in[0]); },
         .reference = [=](const auto& in) { return Doubles{total(in[0])[0] / n}; },
         .gradient_reference = [=](const auto& in, const Doubles& w) { return spread(in, w, n); }});
  }
  // A row added to many rows: its gradient is the column sums (the GPU's
  // two-pass sum_to_shape over chunks of rows and a ragged last tile); the
  // written-out gradient is checked on the small one.
  for (const auto& [r, c] : {std::pair<int64_t, int64_t>{9, 7}, {8193, 771}}) {
    const auto columns = static_cast<size_t>(c);
    rows.push_back({.name = "add " + Shape{r, c}.to_string() + " + " + Shape{c}.to_string(),
                    .kernels = {"add", "sum_to_shape"},
                    .inputs = {uniform(Shape{r, c}), uniform(Shape{c})},
                    .run = [](const auto& in) { return add(in[0], in[1]); },
                    .reference =
                        [](const auto& in) {
                          return broadcast(in[0], in[1], [](double a, double b) { return a + b; });
                        },
                    .low_precision = {},
                    .gradient_reference =
                        [=](const auto&, const Doubles& w) {
                          Doubles sums(columns, 0.0);
                          for (size_t i = 0; i < w.size(); ++i) sums[i % columns] += w[i];
                          return std::vector<Doubles>{w, sums};
                        }});
  }
  for (int axis : {0, 1, 2}) {
    for (bool average : {false, true}) {
      rows.push_back(
          {.name = std::string(average ? "mean" : "sum") + " axis " + std::to_string(axis),
           .kernels = {"sum_axis", "expand_axis"},
           .inputs = {uniform(s)},
           .run =
               [=](const auto& in) {
                 return average ? mean(in[0], axis, axis == 1) : sum(in[0], axis, axis == 1);
               },
           .reference =
               [=](const auto& in) {
                 std::vector<int64_t> dims{4, 3, 5};
                 const int64_t n = dims[axis];
                 dims[axis] = 1;
                 Doubles y(static_cast<size_t>(dims[0] * dims[1] * dims[2]), 0.0);
                 for (int64_t a = 0; a < 4; ++a)
                   for (int64_t b = 0; b < 3; ++b)
                     for (int64_t c = 0; c < 5; ++c) {
                       int64_t i[3] = {a, b, c};
                       i[axis] = 0;
                       y[static_cast<size_t>((i[0] * dims[1] + i[1]) * dims[2] + i[2])] +=
                           in[0][offset(s, {a, b, c})] / (average ? static_cast<double>(n) : 1.0);
                     }
                 return y;
               },
           .gpu = false});
    }
  }
}

void add_dropout_rows(std::vector<OpCase>& rows) {
  const Shape s{9, 17};
  constexpr float p = 0.3f;
  constexpr uint64_t seed = 42;
  rows.push_back({.name = "dropout p=0.3",
                  .kernels = {"dropout", "dropout_backward"},
                  .inputs = {uniform(s)},
                  .run =
                      [=](const auto& in) {
                        Generator generator(seed);
                        return dropout(in[0], p, true, generator);
                      },
                  // The rule the kernels share (and the GPU draws): an element is kept
                  // when its 32 random bits at (seed, offset + i) are at least p * 2^32.
                  .reference =
                      [=](const auto& in) {
                        const auto threshold = static_cast<uint64_t>(std::ldexp(double{p}, 32));
                        Doubles y(in[0].size());
                        for (size_t i = 0; i < y.size(); ++i)
                          y[i] = random_bits_at(seed, i) >= threshold ? in[0][i] / (1 - double{p})
                                                                      : 0.0;
                        return y;
                      }});
}

}  // namespace

void add_pointwise_rows(std::vector<OpCase>& rows) {
  add_activation_rows(rows);
  add_arithmetic_rows(rows);
  add_add_relu_rows(rows);
  add_unary_rows(rows);
  add_reduction_rows(rows);
  add_dropout_rows(rows);
}

}  // namespace tandem::testing
