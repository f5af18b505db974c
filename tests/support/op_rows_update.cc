// Rows for the kernels outside autograd: the optimizer updates, the loss
// scaler's check, the metrics, accumulation, the norm and image resizing.
// Their results are packed into one f32 tensor on the host, so every row
// compares as a flat list whatever the device.
#include <algorithm>
#include <string>

#include "support/loss_reference.h"
#include "support/op_rows.h"
#include "support/reference.h"
#include "tandem/kernels/elementwise.h"
#include "tandem/kernels/loss.h"
#include "tandem/kernels/matmul.h"
#include "tandem/kernels/metrics.h"
#include "tandem/kernels/optimizer_update.h"
#include "tandem/kernels/reduce.h"
#include "tandem/kernels/resize.h"

namespace tandem::testing {
namespace {

Variable pack(const std::vector<Tensor>& parts) {
  std::vector<float> values;
  for (const Tensor& t : parts) {
    const std::vector<float> v = t.to_floats();
    values.insert(values.end(), v.begin(), v.end());
  }
  return Variable(Tensor::from_floats(Shape{static_cast<int64_t>(values.size())}, values));
}

Variable pack_values(std::vector<float> values) {
  return Variable(Tensor::from_floats(Shape{static_cast<int64_t>(values.size())}, values));
}

Variable pack(const kernels::MetricSums& m) {
  return pack_values({static_cast<float>(m.sum), static_cast<float>(m.count)});
}

void add_optimizer_rows(std::vector<OpCase>& rows) {
  const Shape s{1000, 3};
  const std::vector<OpInput> state{fixed(s), fixed(s), fixed(s), fixed(s, 0, 1)};
  for (bool nesterov : {false, true})
    for (bool first : {false, true}) {
      const kernels::SgdUpdate u{.lr = 0.1f,
                                 .momentum = 0.9f,
                                 .dampening = 0.1f,
                                 .decay = 0.01f,
                                 .first = first,
                                 .nesterov = nesterov};
      rows.push_back({.name = std::string("sgd_update") + (nesterov ? " nesterov" : "") +
                              (first ? " first" : ""),
                      .kernels = {"sgd_update"},
                      .inputs = {state[0], state[1], state[2]},
                      .run =
                          [=](const auto& in) {
                            const Tensor w = in[0].value().clone(), buf = in[2].value().clone();
                            kernels::sgd_update(w, in[1].value(), buf, u);
                            return pack({w, buf});
                          },
                      .reference =
                          [=](const auto& in) {
                            Doubles w = in[0], buf = in[2];
                            const double keep = first ? 0 : double{u.momentum},
                                         take = first ? 1 : 1 - double{u.dampening};
                            for (size_t i = 0; i < w.size(); ++i) {
                              const double d = in[1][i] + double{u.decay} * w[i];
                              buf[i] = keep * buf[i] + take * d;
                              w[i] -= double{u.lr} *
                                      (nesterov ? d + double{u.momentum} * buf[i] : buf[i]);
                            }
                            w.insert(w.end(), buf.begin(), buf.end());
                            return w;
                          },
                      .low_precision = {},
                      .gradient = false});
    }
  const kernels::AdamUpdate a{.b1 = 0.9f,
                              .b2 = 0.99f,
                              .eps = 1e-6f,
                              .l2 = 0.01f,
                              .shrink = 0.999f,
                              .step_size = 0.01f,
                              .inv_sqrt_correction2 = 1.3f};
  rows.push_back({.name = "adam_update",
                  .kernels = {"adam_update"},
                  .inputs = state,
                  .run =
                      [=](const auto& in) {
                        const Tensor w = in[0].value().clone(), m = in[2].value().clone(),
                                     v = in[3].value().clone();
                        kernels::adam_update(w, in[1].value(), m, v, a);
                        return pack({w, m, v});
                      },
                  .reference =
                      [=](const auto& in) {
                        Doubles w = in[0], m = in[2], v = in[3];
                        for (size_t i = 0; i < w.size(); ++i) {
                          const double d = in[1][i] + double{a.l2} * w[i];
                          m[i] = double{a.b1} * m[i] + (1 - double{a.b1}) * d;
                          v[i] = double{a.b2} * v[i] + (1 - double{a.b2}) * d * d;
                          w[i] = w[i] * double{a.shrink} -
                                 double{a.step_size} * m[i] /
                                     (std::sqrt(v[i]) * double{a.inv_sqrt_correction2} +
                                      double{a.eps});
                        }
                        w.insert(w.end(), m.begin(), m.end());
                        w.insert(w.end(), v.begin(), v.end());
                        return w;
                      },
                  .low_precision = {},
                  .gradient = false});
}

void add_metric_rows(std::vector<OpCase>& rows) {
  const Shape logits{12, 7}, tokens{2, 6, 7}, labels_shape{12};
  // Distinct logits: no ties for the arg-max or the top k.
  rows.push_back(
      {.name = "count_correct",
       .kernels = {"count_correct"},
       .inputs = {distinct(logits, 0.0), labels(labels_shape, 7)},
       .run =
           [](const auto& in) {
             return pack_values(
                 {static_cast<float>(kernels::count_correct(in[0].value(), in[1].value()))});
           },
       .reference =
           [=](const auto& in) {
             return Doubles{top_k_reference(in[0], 7, as_labels(in[1]), 1, std::nullopt).sum};
           },
       .low_precision = {},
       .gradient = false});
  for (int k : {1, 3})
    rows.push_back({.name = "top_k_correct k=" + std::to_string(k) + " ignored",
                    .kernels = {"top_k_correct"},
                    .inputs = {distinct(tokens, 0.0), labels(Shape{2, 6}, 7, -1)},
                    .run =
                        [=](const auto& in) {
                          return pack(kernels::top_k_correct(in[0].value(), in[1].value(), k, -1));
                        },
                    .reference =
                        [=](const auto& in) {
                          const kernels::MetricSums s =
                              top_k_reference(in[0], 7, as_labels(in[1]), k, -1);
                          return Doubles{s.sum, s.count};
                        },
                    .low_precision = {},
                    .gradient = false,
                    .gpu = false});
  rows.push_back(
      {.name = "token_cross_entropy_sums ignored",
       .kernels = {"token_cross_entropy_sums"},
       .inputs = {uniform(tokens, -3, 3), labels(Shape{2, 6}, 7, -1)},
       .run =
           [](const auto& in) {
             return pack(kernels::token_cross_entropy_sums(in[0].value(), in[1].value(), -1));
           },
       .reference =
           [](const auto& in) {
             double total = 0, count = 0;
             for (double l : token_cross_entropy_reference(in[0], 7, as_labels(in[1]), -1, 0.0)) {
               if (std::isnan(l)) continue;  // ignored
               total += l;
               ++count;
             }
             return Doubles{total, count};
           },
       .gradient = false,
       .gpu = false});
  for (bool squared : {false, true})
    rows.push_back({.name = squared ? "squared_error_sums" : "absolute_error_sums",
                    .kernels = {squared ? "squared_error_sums" : "absolute_error_sums"},
                    .inputs = {uniform(Shape{6, 4}), uniform(Shape{6, 4})},
                    .run =
                        [=](const auto& in) {
                          return pack(
                              squared ? kernels::squared_error_sums(in[0].value(), in[1].value())
                                      : kernels::absolute_error_sums(in[0].value(), in[1].value()));
                        },
                    .reference =
                        [=](const auto& in) {
                          double total = 0;
                          for (size_t i = 0; i < in[0].size(); ++i) {
                            const double d = in[0][i] - in[1][i];
                            total += squared ? d * d : std::abs(d);
                          }
                          return Doubles{total, 24};
                        },
                    .gradient = false,
                    .gpu = false});
}

void add_accumulation_rows(std::vector<OpCase>& rows) {
  const Shape s{5, 9};
  // An f32 destination (a gradient buffer) accumulating the row's dtype.
  rows.push_back({.name = "add_into alpha -0.5",
                  .kernels = {"add_into"},
                  .inputs = {in_f32(uniform(s)), uniform(s)},
                  .run =
                      [](const auto& in) {
                        Tensor dst = in[0].value().clone();
                        kernels::add_into(dst, in[1].value(), -0.5f);
                        return pack({dst});
                      },
                  .reference =
                      [](const auto& in) {
                        Doubles y = in[0];
                        for (size_t i = 0; i < y.size(); ++i) y[i] -= 0.5 * in[1][i];
                        return y;
                      },
                  .gradient = false});
  // A destination of the row's dtype (a gradient buffer of the gradient's dtype).
  rows.push_back({.name = "add_into same dtype",
                  .kernels = {"add_into"},
                  .inputs = {uniform(Shape{3, 37}), uniform(Shape{3, 37})},
                  .run =
                      [](const auto& in) {
                        Tensor dst = in[0].value().clone();
                        kernels::add_into(dst, in[1].value());
                        return pack({dst});
                      },
                  .reference =
                      [](const auto& in) {
                        Doubles y = in[0];
                        for (size_t i = 0; i < y.size(); ++i) y[i] += in[1][i];
                        return y;
                      },
                  .gradient = false});
  // Finite values scaled (flag 1), then one infinity among them (flag 0).
  rows.push_back({.name = "scale_and_check_finite",
                  .kernels = {"scale_and_check_finite"},
                  .inputs = {uniform(s), uniform(Shape{4})},
                  .run =
                      [](const auto& in) {
                        const std::vector<Tensor> t{in[0].value().clone(), in[1].value().clone()};
                        const bool finite = kernels::scale_and_check_finite(t, 0.25f);
                        const std::vector<Tensor> bad{
                            Tensor::from_floats(Shape{3}, std::vector<float>{1.0f, INFINITY, 2.0f})
                                .to(in[0].value().device())};
                        const bool bad_finite = kernels::scale_and_check_finite(bad, 0.25f);
                        return pack({t[0], t[1],
                                     Tensor::from_floats(
                                         Shape{2}, std::vector<float>{finite ? 1.0f : 0.0f,
                                                                      bad_finite ? 1.0f : 0.0f})});
                      },
                  .reference =
                      [](const auto& in) {
                        Doubles y = map(in[0], [](double x) { return x / 4; });
                        for (double v : in[1]) y.push_back(v / 4);
                        y.push_back(1);
                        y.push_back(0);
                        return y;
                      },
                  .low_precision = {},
                  .gradient = false});
  rows.push_back({.name = "squared_norm",
                  .kernels = {"squared_norm"},
                  .inputs = {uniform(s)},
                  .run =
                      [](const auto& in) {
                        return pack_values(
                            {static_cast<float>(kernels::squared_norm(in[0].value()))});
                      },
                  .reference =
                      [](const auto& in) {
                        double t = 0;
                        for (double v : in[0]) t += v * v;
                        return Doubles{t};
                      },
                  .gradient = false});
  rows.push_back(
      {.name = "batched_matmul_into",
       .kernels = {"batched_matmul_into"},
       .inputs = {uniform(Shape{3, 4, 5}), uniform(Shape{3, 5, 2})},
       .run =
           [](const auto& in) {
             Tensor out = Tensor::empty(Shape{3, 4, 2}, DType::f32, in[0].value().device());
             kernels::batched_matmul_into(in[0].value(), in[1].value(), out);
             return pack({out});
           },
       .reference =
           [](const auto& in) {
             return matmul_reference(in[0], in[1],
                                     {.batch = 3, .M = 4, .K = 5, .N = 2, .shared_b = false});
           },
       .low_precision = {DType::bf16},
       .gradient = false});
  const Shape images{2, 5, 7, 3};
  for (const auto& size : {std::pair<int64_t, int64_t>{9, 4}, {2, 11}})
    rows.push_back(
        {.name =
             "resize_bilinear to " + std::to_string(size.first) + "x" + std::to_string(size.second),
         .kernels = {"resize_bilinear"},
         .inputs = {uniform(images)},
         .run =
             [=](const auto& in) {
               return Variable(kernels::resize_bilinear(in[0].value(), size.first, size.second));
             },
         .reference =
             [=](const auto& in) {
               return resize_reference(in[0], images, size.first, size.second);
             },
         .low_precision = {},
         .gradient = false,
         .gpu = false});
}

}  // namespace

void add_update_and_metric_rows(std::vector<OpCase>& rows) {
  add_optimizer_rows(rows);
  add_metric_rows(rows);
  add_accumulation_rows(rows);
}

}  // namespace tandem::testing
