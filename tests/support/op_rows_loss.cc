// Rows for the losses: softmax cross-entropy (mean and per example, with
// ignored labels and label smoothing) and the element-wise regression and
// binary losses.
#include <algorithm>
#include <optional>
#include <string>

#include "support/loss_reference.h"
#include "support/op_rows.h"
#include "tandem/autograd/functions.h"

namespace tandem::testing {
namespace {

void add_cross_entropy_rows(std::vector<OpCase>& rows) {
  // The mean over the batch, or the sum over a given normalizer (the global batch).
  for (double normalizer : {0.0, 24.0})
    rows.push_back({.name = "softmax_cross_entropy normalizer " + std::to_string(int(normalizer)),
                    .kernels = {"softmax_cross_entropy", "softmax_cross_entropy_backward"},
                    .inputs = {uniform(Shape{6, 11}, -3, 3), labels(Shape{6}, 11)},
                    .run =
                        [=](const auto& in) {
                          return softmax_cross_entropy(in[0], in[1].value(), normalizer);
                        },
                    .reference =
                        [=](const auto& in) {
                          double total = 0;
                          for (double l : token_cross_entropy_reference(in[0], 11, as_labels(in[1]),
                                                                        std::nullopt, 0.0))
                            total += l;
                          return Doubles{total / (normalizer > 0 ? normalizer : 6)};
                        }});
  struct Variant {
    std::string name;
    Shape logits, labels;
    int ignored;
    double smoothing;
  };
  for (const Variant& v : {Variant{"classifier", {6, 11}, {6}, 0, 0.0},
                           Variant{"tokens ignored smoothed", {3, 4, 9}, {3, 4}, -100, 0.1}}) {
    const int64_t K = v.logits.dim(v.logits.rank() - 1), N = v.labels.dim(0);
    const CrossEntropyOptions options{
        .ignore_index = v.ignored < 0 ? std::optional<int32_t>(v.ignored) : std::nullopt,
        .label_smoothing = v.smoothing};
    rows.push_back({.name = "softmax_cross_entropy_per_example " + v.name,
                    .kernels = {"softmax_cross_entropy_per_example",
                                "softmax_cross_entropy_per_example_backward"},
                    .inputs = {uniform(v.logits, -3, 3), labels(v.labels, int(K), v.ignored)},
                    .run =
                        [=](const auto& in) {
                          return softmax_cross_entropy_per_example(in[0], in[1].value(), options);
                        },
                    .reference =
                        [=](const auto& in) {
                          return cross_entropy_per_example_reference(in[0], K, as_labels(in[1]), N,
                                                                     options);
                        }});
  }
}

void add_elementwise_loss_rows(std::vector<OpCase>& rows) {
  using Kind = kernels::ElementwiseLoss;
  struct Variant {
    const char* name;
    Kind kind;
    Variable (*run)(const Variable&, const Tensor&);
  };
  const Variant variants[] = {
      {"binary_cross_entropy_with_logits", Kind::binary_cross_entropy_with_logits,
       [](const Variable& p, const Tensor& t) {
         return binary_cross_entropy_with_logits_per_example(p, t);
       }},
      {"mean_squared_error", Kind::mean_squared_error,
       [](const Variable& p, const Tensor& t) { return mean_squared_error_per_example(p, t); }},
      {"mean_absolute_error", Kind::mean_absolute_error,
       [](const Variable& p, const Tensor& t) { return mean_absolute_error_per_example(p, t); }},
      {"huber delta 0.7", Kind::huber,
       [](const Variable& p, const Tensor& t) { return huber_per_example(p, t, 0.7); }},
  };
  const Shape s{5, 2, 3};
  for (const Variant& v : variants) {
    // Distinct predictions against targets in [0, 1] at a distance: no |d| = 0
    // (the absolute error's kink) or |d| = delta (Huber's) for this seed.
    const bool binary = v.kind == Kind::binary_cross_entropy_with_logits;
    rows.push_back(
        {.name = std::string(v.name) + "_per_example",
         .kernels = {"elementwise_loss_per_example", "elementwise_loss_per_example_backward"},
         .inputs = {distinct(s, 0.05), fixed(s, binary ? 0 : -0.03, binary ? 1 : 0.03)},
         .run = [run = v.run](const auto& in) { return run(in[0], in[1].value()); },
         .reference =
             [kind = v.kind](const auto& in) {
               return elementwise_loss_per_example_reference(in[0], in[1], 5,
                                                             {.kind = kind, .huber_delta = 0.7});
             },
         .gpu = false});
  }
}

}  // namespace

void add_loss_rows(std::vector<OpCase>& rows) {
  add_cross_entropy_rows(rows);
  add_elementwise_loss_rows(rows);
}

}  // namespace tandem::testing
