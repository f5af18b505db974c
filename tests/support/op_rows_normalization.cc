// Rows for layer, RMS and batch normalisation and the embedding lookup.
#include <algorithm>
#include <cmath>
#include <string>

#include "support/op_rows.h"
#include "tandem/autograd/cross_replica.h"
#include "tandem/autograd/functions.h"
#include "tandem/kernels/layout.h"
#include "tandem/kernels/normalization.h"

namespace tandem::testing {
namespace {

constexpr float kEps = 1e-5f;

// Normalises over rows of n (layer and RMS norm) with per-column gamma and beta.
Doubles normalize_rows(const Doubles& x, const Doubles& gamma, const Doubles* beta, size_t n,
                       bool centred) {
  return map_rows(x, n, [&](const double* in, double* out) {
    double mean = 0, sq = 0;
    for (size_t j = 0; j < n; ++j) mean += centred ? in[j] / n : 0.0;
    for (size_t j = 0; j < n; ++j) sq += (in[j] - mean) * (in[j] - mean) / n;
    const double r = 1 / std::sqrt(sq + kEps);
    for (size_t j = 0; j < n; ++j) out[j] = (in[j] - mean) * r * gamma[j] + (beta ? (*beta)[j] : 0);
  });
}

// Normalises each of the C columns of x (rows, C) by the given or the batch's moments.
Doubles normalize_columns(const Doubles& x, const Doubles& gamma, const Doubles& beta, size_t C,
                          const Doubles* mean_in, const Doubles* var_in, bool relu) {
  const size_t rows = x.size() / C;
  Doubles y(x.size());
  for (size_t c = 0; c < C; ++c) {
    double mean = 0, var = 0;
    for (size_t r = 0; r < rows; ++r) mean += x[r * C + c] / rows;
    for (size_t r = 0; r < rows; ++r) var += (x[r * C + c] - mean) * (x[r * C + c] - mean) / rows;
    if (mean_in) mean = (*mean_in)[c], var = (*var_in)[c];
    const double rstd = 1 / std::sqrt(var + kEps);
    for (size_t r = 0; r < rows; ++r) {
      const double v = (x[r * C + c] - mean) * rstd * gamma[c] + beta[c];
      y[r * C + c] = relu ? std::max(v, 0.0) : v;
    }
  }
  return y;
}

// A cross-replica sum over one replica: the synchronised batch norm's
// arithmetic, in its parts, on one device.
struct OneReplica final : CrossReplicaSum {
  void sum(Tensor&) override {}
};

// The f32 tolerance of a norm whose parameter gradients sum `rows` float
// terms: the default up to 32 rows, growing as the square root past them
// (the terms' rounding errors add up: 520 rows of 32 on the portable loops
// were 1.4e-6 off a gradient of 0.28, 105 rows on oneDNN's AVX2 batch norm
// 1.2e-6 off 0.024).
double summed_rows_tolerance(int64_t rows) {
  return 1e-6 * std::max(1.0, std::sqrt(static_cast<double>(rows) / 32.0));
}

// Rows of 8 to 1,000 features (the kernels' short- and long-row paths).
void add_row_norm_rows(std::vector<OpCase>& rows) {
  for (const Shape& s :
       {Shape{2, 3, 33}, Shape{3, 5, 256}, Shape{2, 1000}, Shape{300, 8}, Shape{260, 16}}) {
    const int64_t C = s.dim(s.rank() - 1);
    const auto n = static_cast<size_t>(C);
    const double tolerance = summed_rows_tolerance(s.numel() / C);
    rows.push_back(
        {.name = "layer_norm " + s.to_string(),
         .kernels = {"layer_norm", "layer_norm_backward"},
         .inputs = {uniform(s, -2, 2), in_f32(uniform(Shape{C}, 0.5, 1.5)),
                    in_f32(uniform(Shape{C}))},
         .run = [](const auto& in) { return layer_norm(in[0], in[1], in[2], kEps); },
         .reference = [=](const auto& in) { return normalize_rows(in[0], in[1], &in[2], n, true); },
         .tolerance = tolerance});
    rows.push_back(
        {.name = "rms_norm " + s.to_string(),
         .kernels = {"rms_norm", "rms_norm_backward"},
         .inputs = {uniform(s, -2, 2), in_f32(uniform(Shape{C}, 0.5, 1.5))},
         .run = [](const auto& in) { return rms_norm(in[0], in[1], kEps); },
         .reference =
             [=](const auto& in) { return normalize_rows(in[0], in[1], nullptr, n, false); },
         .tolerance = tolerance});
  }
}

// Training-mode batch norm over x (channels last): 5 channels (oneDNN's
// primitive), 32 and 16 (multiples of 16: tandem's AVX-512 row kernels,
// which run 32 values a step; 16 channels over an odd number of rows
// leaves them a last half step).
void add_batch_norm_training_rows(std::vector<OpCase>& rows, const Shape& x,
                                  const std::string& suffix) {
  const int64_t C = x.dim(-1);
  const std::vector<OpInput> inputs{uniform(x, -2, 2), in_f32(uniform(Shape{C}, 0.5, 1.5)),
                                    in_f32(uniform(Shape{C})), in_f32(fixed(Shape{C})),
                                    in_f32(fixed(Shape{C}, 0.5, 1.5))};
  for (bool relu : {false, true}) {
    rows.push_back(
        {.name = (relu ? "batch_norm_relu training" : "batch_norm training") + suffix,
         .kernels = {"batch_norm_train", "batch_norm_backward", "update_running_moments"},
         .inputs = inputs,
         .run =
             [=](const auto& in) {
               Tensor mean = in[3].value().clone(), var = in[4].value().clone();
               return relu ? batch_norm_relu(in[0], in[1], in[2], mean, var, true, 0.1f, kEps)
                           : batch_norm(in[0], in[1], in[2], mean, var, true, 0.1f, kEps);
             },
         .reference =
             [=](const auto& in) {
               return normalize_columns(in[0], in[1], in[2], C, nullptr, nullptr, relu);
             },
         .low_precision = {DType::bf16},
         .tolerance = summed_rows_tolerance(x.numel() / C)});
  }
}

// A residual block's end: relu(batch_norm(x) + residual), fused where the
// row kernels take x (16 or 32 channels) and composed elsewhere (5 channels).
void add_batch_norm_add_relu_rows(std::vector<OpCase>& rows) {
  for (const Shape& x : {Shape{3, 5, 7, 32}, Shape{3, 5, 7, 16}, Shape{4, 3, 2, 5}}) {
    const int64_t C = x.dim(-1);
    rows.push_back(
        {.name = "batch_norm_add_relu training " + x.to_string(),
         .kernels = {"batch_norm_add_relu_train", "batch_norm_add_relu_backward"},
         .inputs = {uniform(x, -2, 2), in_f32(uniform(Shape{C}, 0.5, 1.5)),
                    in_f32(uniform(Shape{C})), uniform(x, -1, 1), in_f32(fixed(Shape{C})),
                    in_f32(fixed(Shape{C}, 0.5, 1.5))},
         .run =
             [](const auto& in) {
               Tensor mean = in[4].value().clone(), var = in[5].value().clone();
               return batch_norm_add_relu(in[0], in[1], in[2], in[3], mean, var, true, 0.1f, kEps);
             },
         .reference =
             [=](const auto& in) {
               Doubles y = normalize_columns(in[0], in[1], in[2], C, nullptr, nullptr, false);
               for (size_t i = 0; i < y.size(); ++i) y[i] = std::max(y[i] + in[3][i], 0.0);
               return y;
             },
         // bf16: Functions.BatchNormAddReluGivesTheComposedOpsBits checks the
         // fused op against batch_norm and add_relu bit for bit, each of
         // which its own row checks in bf16 (the composition's two roundings
         // before the ReLU's kink put it past a single op's bf16 bound).
         .low_precision = {},
         .tolerance = summed_rows_tolerance(x.numel() / C),
         .gpu = false});
  }
}

void add_batch_norm_rows(std::vector<OpCase>& rows) {
  add_batch_norm_training_rows(rows, Shape{4, 3, 2, 5}, "");
  add_batch_norm_training_rows(rows, Shape{3, 5, 7, 32}, " 32 channels");
  add_batch_norm_training_rows(rows, Shape{3, 5, 7, 16}, " 16 channels");
  add_batch_norm_add_relu_rows(rows);
  const Shape x{4, 3, 2, 5};
  const std::vector<OpInput> inputs{uniform(x, -2, 2), in_f32(uniform(Shape{5}, 0.5, 1.5)),
                                    in_f32(uniform(Shape{5})), in_f32(fixed(Shape{5})),
                                    in_f32(fixed(Shape{5}, 0.5, 1.5))};
  // Inference normalises by the running moments; batch_norm_relu then
  // composes batch norm and relu.
  for (bool relu : {false, true})
    rows.push_back(
        {.name = relu ? "batch_norm_relu inference" : "batch_norm inference",
         .kernels = {"batch_norm_inference", "inverse_std", "batch_norm_backward_sums",
                     "batch_norm_apply"},
         .inputs = inputs,
         .run =
             [=](const auto& in) {
               Tensor mean = in[3].value(), var = in[4].value();
               return relu ? batch_norm_relu(in[0], in[1], in[2], mean, var, false, 0.1f, kEps)
                           : batch_norm(in[0], in[1], in[2], mean, var, false, 0.1f, kEps);
             },
         .reference =
             [=](const auto& in) {
               return normalize_columns(in[0], in[1], in[2], 5, &in[3], &in[4], relu);
             },
         .low_precision = {DType::bf16}});
  rows.push_back(
      {.name = "sync_batch_norm one replica",
       .kernels = {"batch_norm_moments", "inverse_std", "batch_norm_apply",
                   "update_running_moments", "batch_norm_backward_sums", "batch_norm_backward_dx"},
       .inputs = inputs,
       .run =
           [](const auto& in) {
             Tensor mean = in[3].value().clone(), var = in[4].value().clone();
             // The backward sums through it too: it outlives the row's run.
             static OneReplica replicas;
             return sync_batch_norm(in[0], in[1], in[2], mean, var, 0.1f, kEps, replicas);
           },
       .reference =
           [](const auto& in) {
             return normalize_columns(in[0], in[1], in[2], 5, nullptr, nullptr, false);
           },
       .low_precision = {DType::bf16}});
  // The running moments after one training step: (1 - m) old + m batch, the
  // variance unbiased.
  rows.push_back({.name = "batch_norm running moments",
                  .kernels = {"batch_norm_train", "update_running_moments"},
                  .inputs = inputs,
                  .run =
                      [](const auto& in) {
                        Tensor mean = in[3].value().clone(), var = in[4].value().clone();
                        kernels::batch_norm_train(in[0].value(), in[1].value(), in[2].value(), mean,
                                                  var, 0.1f, kEps);
                        return Variable(kernels::concat(std::vector<Tensor>{mean, var}, 0));
                      },
                  .reference =
                      [](const auto& in) {
                        const size_t C = 5, n = in[0].size() / C;
                        Doubles y(2 * C);
                        for (size_t c = 0; c < C; ++c) {
                          double mean = 0, var = 0;
                          for (size_t r = 0; r < n; ++r) mean += in[0][r * C + c] / n;
                          for (size_t r = 0; r < n; ++r)
                            var += (in[0][r * C + c] - mean) * (in[0][r * C + c] - mean) / (n - 1);
                          y[c] = 0.9 * in[3][c] + 0.1 * mean;
                          y[C + c] = 0.9 * in[4][c] + 0.1 * var;
                        }
                        return y;
                      },
                  .low_precision = {DType::bf16},

                  .gradient = false});
}

// Rows of the table gathered by the indices, and their gradient scattered
// back, written out (checked against central differences on the small
// table; the large one has many ranges of rows and blocks of columns, as a
// GPU splits them).
OpCase embedding_row(const std::string& name, int64_t vocabulary, int64_t width,
                     const Shape& indices) {
  const auto D = static_cast<size_t>(width);
  OpCase row{.name = name,
             .kernels = {"embedding", "embedding_backward"},
             .inputs = {uniform(Shape{vocabulary, width}), labels(indices, int(vocabulary))},
             .run = [](const auto& in) { return embedding(in[0], in[1].value()); },
             .reference =
                 [=](const auto& in) {
                   Doubles y;
                   for (double index : in[1]) {
                     const auto r = static_cast<size_t>(index);
                     y.insert(y.end(), in[0].begin() + r * D, in[0].begin() + (r + 1) * D);
                   }
                   return y;
                 }};
  row.gradient_reference = [=](const auto& in, const Doubles& dy) {
    Doubles dw(in[0].size(), 0.0);
    for (size_t i = 0; i < in[1].size(); ++i)
      for (size_t c = 0; c < D; ++c) dw[static_cast<size_t>(in[1][i]) * D + c] += dy[i * D + c];
    return std::vector<Doubles>{dw, {}};
  };
  return row;
}

void add_embedding_rows(std::vector<OpCase>& rows) {
  // Repeated indices: their gradients add up in one row of the table.
  rows.push_back(embedding_row("embedding", 7, 6, Shape{3, 5}));
  rows.push_back(embedding_row("embedding 700x300 by 3x1000", 700, 300, Shape{3, 1000}));
}

}  // namespace

void add_normalization_rows(std::vector<OpCase>& rows) {
  add_row_norm_rows(rows);
  add_batch_norm_rows(rows);
  add_embedding_rows(rows);
}

}  // namespace tandem::testing
