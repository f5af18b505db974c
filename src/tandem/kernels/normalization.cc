#include "tandem/kernels/normalization.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tandem/base/parallel.h"
#include "tandem/base/target_clones.h"
#include "tandem/kernels/detail/batch_norm.h"
#include "tandem/kernels/detail/checks.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/float_io.h"
#include "tandem/kernels/detail/layer_norm_rows.h"
#include "tandem/kernels/detail/row_blocks.h"

namespace tandem::kernels {
namespace {

using detail::dispatch_floating;
using detail::from_f32;
using detail::reduce_rows;
using detail::to_f32;

// Callers copy the fields into variables rather than bind them: clang 14
// cannot capture structured bindings in lambdas.
struct RowsCols {
  int64_t rows, cols;
};

RowsCols rows_cols(const Tensor& x, const char* op) {
  detail::check_rows(op, x);
  const int64_t cols = x.dim(-1);
  return {cols == 0 ? 0 : x.numel() / cols, cols};
}

// A per-column (or, for layer norm's statistics, per-row) f32 vector of
// `count` elements on x's device.
void check_param(const Tensor& x, const Tensor& p, int64_t count, const char* op,
                 const char* name) {
  if (!p.defined() || p.dtype() != DType::f32 || p.numel() != count) {
    TANDEM_THROW(ShapeError, op, ": ", name, " must be f32 with ", count, " elements, got ",
                 p.to_string());
  }
  detail::check_same_device(op, x, {&p});
}

void check_dy(const Tensor& dy, const Tensor& x, const char* op) {
  if (dy.shape() != x.shape() || dy.dtype() != x.dtype()) {
    TANDEM_THROW(ShapeError, op, ": dy ", dy.to_string(), " does not match x ", x.to_string());
  }
  detail::check_same_device(op, x, {&dy});
}

// Layer norm's rows, in loops that vectorise: 16 partial sums in float (a
// row is at most a few thousand values), not one in double. The bodies are
// templates inlined into one clone set per storage type.
constexpr int kLanes = 16;

template <typename T>
[[gnu::always_inline]] inline void layer_norm_row_body(const T* __restrict x, T* __restrict y,
                                                       int64_t C, const float* __restrict g,
                                                       const float* __restrict b, float eps,
                                                       float* __restrict mean,
                                                       float* __restrict rstd) {
  float lanes[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= C; c += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] += to_f32(x[c + k]);
  float sum = 0.0f;
  for (float lane : lanes) sum += lane;
  for (; c < C; ++c) sum += to_f32(x[c]);
  const float m = sum / static_cast<float>(C);
  float squares[kLanes] = {};
  for (c = 0; c + kLanes <= C; c += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float d = to_f32(x[c + k]) - m;
      squares[k] += d * d;
    }
  }
  float sq = 0.0f;
  for (float lane : squares) sq += lane;
  for (; c < C; ++c) sq += (to_f32(x[c]) - m) * (to_f32(x[c]) - m);
  const float s = 1.0f / std::sqrt(sq / static_cast<float>(C) + eps);
  for (c = 0; c < C; ++c) y[c] = from_f32<T>((to_f32(x[c]) - m) * s * g[c] + b[c]);
  *mean = m;
  *rstd = s;
}

template <typename T>
[[gnu::always_inline]] inline void layer_norm_backward_row_body(const T* __restrict x,
                                                                const T* __restrict dy,
                                                                T* __restrict dx, int64_t C,
                                                                const float* __restrict g, float m,
                                                                float s) {
  float lanes_g[kLanes] = {}, lanes_gx[kLanes] = {};  // sums of dxhat and dxhat * xhat
  int64_t c = 0;
  for (; c + kLanes <= C; c += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float dxhat = to_f32(dy[c + k]) * g[c + k];
      lanes_g[k] += dxhat;
      lanes_gx[k] += dxhat * (to_f32(x[c + k]) - m) * s;
    }
  }
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int k = 0; k < kLanes; ++k) {
    sum_g += lanes_g[k];
    sum_gx += lanes_gx[k];
  }
  for (; c < C; ++c) {
    const float dxhat = to_f32(dy[c]) * g[c];
    sum_g += dxhat;
    sum_gx += dxhat * (to_f32(x[c]) - m) * s;
  }
  const float mean_g = sum_g / static_cast<float>(C), mean_gx = sum_gx / static_cast<float>(C);
  for (c = 0; c < C; ++c) {
    const float xhat = (to_f32(x[c]) - m) * s;
    dx[c] = from_f32<T>(s * (to_f32(dy[c]) * g[c] - mean_g - xhat * mean_gx));
  }
}

// acc[c] += dgamma's and acc[C + c] += dbeta's share of the row.
template <typename T>
[[gnu::always_inline]] inline void layer_norm_param_row_body(const T* __restrict x,
                                                             const T* __restrict dy, int64_t C,
                                                             float m, float s,
                                                             double* __restrict acc) {
  for (int64_t c = 0; c < C; ++c) {
    const float gy = to_f32(dy[c]);
    acc[c] += static_cast<double>(gy * (to_f32(x[c]) - m) * s);
    acc[C + c] += static_cast<double>(gy);
  }
}

#define TANDEM_LAYER_NORM_ROWS(T)                                                                 \
  TANDEM_TARGET_CLONES void layer_norm_row(const T* x, T* y, int64_t C, const float* g,           \
                                           const float* b, float eps, float* mean, float* rstd) { \
    layer_norm_row_body(x, y, C, g, b, eps, mean, rstd);                                          \
  }                                                                                               \
  TANDEM_TARGET_CLONES void layer_norm_backward_row(const T* x, const T* dy, T* dx, int64_t C,    \
                                                    const float* g, float m, float s) {           \
    layer_norm_backward_row_body(x, dy, dx, C, g, m, s);                                          \
  }                                                                                               \
  TANDEM_TARGET_CLONES void layer_norm_param_row(const T* x, const T* dy, int64_t C, float m,     \
                                                 float s, double* acc) {                          \
    layer_norm_param_row_body(x, dy, C, m, s, acc);                                               \
  }
TANDEM_LAYER_NORM_ROWS(float)
TANDEM_LAYER_NORM_ROWS(detail::Bf16)
TANDEM_LAYER_NORM_ROWS(detail::F16)
#undef TANDEM_LAYER_NORM_ROWS

Tensor f32_vector(const std::vector<double>& values, Device device) {
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(values.size())}, DType::f32, device);
  float* p = t.data<float>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = static_cast<float>(values[i]);
  return t;
}

// layer_norm_backward's dx (written) and parameter sums (returned: dgamma
// in [0, C), dbeta in [C, 2C)) on the portable rows.
std::vector<double> layer_norm_portable_backward(const Tensor& dy, const Tensor& x,
                                                 const Tensor& mean, const Tensor& rstd,
                                                 const Tensor& gamma, Tensor& dx_out) {
  const int64_t C = x.dim(-1), R = C == 0 ? 0 : x.numel() / C;
  const float* g = gamma.data<float>();
  const float* mu = mean.data<float>();
  const float* rs = rstd.data<float>();
  std::vector<double> param_sums;
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x.raw_data());
    const T* gy = static_cast<const T*>(dy.raw_data());
    T* dx = static_cast<T*>(dx_out.raw_data());
    parallel_for(R, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        layer_norm_backward_row(xs + r * C, gy + r * C, dx + r * C, C, g, mu[r], rs[r]);
      }
    });
    param_sums = reduce_rows(R, 2 * C, [&](int64_t r, double* acc) {
      layer_norm_param_row(xs + r * C, gy + r * C, C, mu[r], rs[r], acc);
    });
  });
  return param_sums;
}

}  // namespace

NormResult layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) {
  const RowsCols shape = rows_cols(x, "layer_norm");
  const int64_t R = shape.rows, C = shape.cols;
  check_param(x, gamma, C, "layer_norm", "gamma");
  check_param(x, beta, C, "layer_norm", "beta");
  TANDEM_DISPATCH_CUDA(x, layer_norm(x, gamma, beta, eps));
  NormResult result;
  result.y = Tensor::empty(x.shape(), x.dtype(), x.device());
  result.mean = Tensor::empty(Shape{R}, DType::f32, x.device());
  result.rstd = Tensor::empty(Shape{R}, DType::f32, x.device());
  const float* g = gamma.data<float>();
  const float* b = beta.data<float>();
  if (detail::layer_norm_rows_apply(x)) {
    detail::layer_norm_rows(x, gamma, beta, eps, result);
    return result;
  }
  float* mean = result.mean.data<float>();
  float* rstd = result.rstd.data<float>();
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.raw_data());
    T* out = static_cast<T*>(result.y.raw_data());
    parallel_for(R, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        layer_norm_row(in + r * C, out + r * C, C, g, b, eps, mean + r, rstd + r);
      }
    });
  });
  return result;
}

NormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& rstd, const Tensor& gamma) {
  const RowsCols shape = rows_cols(x, "layer_norm_backward");
  const int64_t R = shape.rows, C = shape.cols;
  check_dy(dy, x, "layer_norm_backward");
  check_param(x, gamma, C, "layer_norm_backward", "gamma");
  check_param(x, mean, R, "layer_norm_backward", "the mean");
  check_param(x, rstd, R, "layer_norm_backward", "rstd");
  TANDEM_DISPATCH_CUDA(x, layer_norm_backward(dy, x, mean, rstd, gamma));
  NormGrads grads;
  grads.dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  std::vector<double> param_sums;
  if (detail::layer_norm_rows_apply(x)) {
    param_sums = detail::layer_norm_backward_rows(dy, x, mean, rstd, gamma, grads.dx);
  } else {
    param_sums = layer_norm_portable_backward(dy, x, mean, rstd, gamma, grads.dx);
  }
  grads.dgamma = f32_vector({param_sums.begin(), param_sums.begin() + C}, x.device());
  grads.dbeta = f32_vector({param_sums.begin() + C, param_sums.end()}, x.device());
  return grads;
}

NormResult rms_norm(const Tensor& x, const Tensor& gamma, float eps) {
  const RowsCols shape = rows_cols(x, "rms_norm");
  const int64_t R = shape.rows, C = shape.cols;
  check_param(x, gamma, C, "rms_norm", "gamma");
  TANDEM_DISPATCH_CUDA(x, rms_norm(x, gamma, eps));
  NormResult result;
  result.y = Tensor::empty(x.shape(), x.dtype(), x.device());
  result.rstd = Tensor::empty(Shape{R}, DType::f32, x.device());
  const float* g = gamma.data<float>();
  float* rstd = result.rstd.data<float>();
  dispatch_floating(x.dtype(), "rms_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.raw_data());
    T* out = static_cast<T*>(result.y.raw_data());
    parallel_for(R, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = in + r * C;
        double sq = 0.0;
        for (int64_t c = 0; c < C; ++c) {
          const double v = to_f32(row[c]);
          sq += v * v;
        }
        const float s = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(C) + eps));
        rstd[r] = s;
        for (int64_t c = 0; c < C; ++c) out[r * C + c] = from_f32<T>(to_f32(row[c]) * s * g[c]);
      }
    });
  });
  return result;
}

NormGrads rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& rstd,
                            const Tensor& gamma) {
  const RowsCols shape = rows_cols(x, "rms_norm_backward");
  const int64_t R = shape.rows, C = shape.cols;
  check_dy(dy, x, "rms_norm_backward");
  check_param(x, gamma, C, "rms_norm_backward", "gamma");
  check_param(x, rstd, R, "rms_norm_backward", "rstd");
  TANDEM_DISPATCH_CUDA(x, rms_norm_backward(dy, x, rstd, gamma));
  NormGrads grads;
  grads.dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  const float* g = gamma.data<float>();
  const float* rs = rstd.data<float>();
  std::vector<double> dgamma;
  dispatch_floating(x.dtype(), "rms_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x.raw_data());
    const T* gy = static_cast<const T*>(dy.raw_data());
    T* dx = static_cast<T*>(grads.dx.raw_data());
    parallel_for(R, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        double mean_gx = 0.0;  // mean of dxhat * xhat
        for (int64_t c = 0; c < C; ++c) {
          mean_gx +=
              static_cast<double>(to_f32(gy[r * C + c])) * g[c] * to_f32(xs[r * C + c]) * rs[r];
        }
        mean_gx /= static_cast<double>(C);
        for (int64_t c = 0; c < C; ++c) {
          const double xhat = static_cast<double>(to_f32(xs[r * C + c])) * rs[r];
          const double dxhat = static_cast<double>(to_f32(gy[r * C + c])) * g[c];
          dx[r * C + c] = from_f32<T>(static_cast<float>(rs[r] * (dxhat - xhat * mean_gx)));
        }
      }
    });
    dgamma = reduce_rows(R, C, [&](int64_t r, double* acc) {
      for (int64_t c = 0; c < C; ++c)
        acc[c] += static_cast<double>(to_f32(gy[r * C + c])) * to_f32(xs[r * C + c]) * rs[r];
    });
  });
  grads.dgamma = f32_vector(dgamma, x.device());
  return grads;
}

Moments batch_norm_moments(const Tensor& x) {
  const RowsCols shape = rows_cols(x, "batch_norm");
  const int64_t R = shape.rows, C = shape.cols;
  if (R == 0)
    TANDEM_THROW(ShapeError, "batch_norm: no rows to take statistics over in ", x.to_string());
  TANDEM_DISPATCH_CUDA(x, batch_norm_moments(x));
  Moments m;
  m.count = R;
  dispatch_floating(x.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.raw_data());
    std::vector<double> mean = reduce_rows(R, C, [&](int64_t r, double* acc) {
      for (int64_t c = 0; c < C; ++c) acc[c] += to_f32(in[r * C + c]);
    });
    for (double& v : mean) v /= static_cast<double>(R);
    std::vector<double> var = reduce_rows(R, C, [&](int64_t r, double* acc) {
      for (int64_t c = 0; c < C; ++c) {
        const double d = to_f32(in[r * C + c]) - mean[c];
        acc[c] += d * d;
      }
    });
    for (double& v : var) v /= static_cast<double>(R);
    m.mean = f32_vector(mean, x.device());
    m.variance = f32_vector(var, x.device());
  });
  return m;
}

Tensor inverse_std(const Tensor& variance, float eps) {
  if (variance.dtype() != DType::f32) {
    TANDEM_THROW(ShapeError, "inverse_std: the variance must be f32, got ", variance.to_string());
  }
  TANDEM_DISPATCH_CUDA(variance, inverse_std(variance, eps));
  Tensor out = Tensor::empty(variance.shape(), DType::f32, variance.device());
  const float* v = variance.data<float>();
  float* o = out.data<float>();
  for (int64_t c = 0; c < variance.numel(); ++c) {
    o[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(v[c]) + eps));
  }
  return out;
}

Tensor batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& rstd,
                        const Tensor& gamma, const Tensor& beta) {
  const RowsCols shape = rows_cols(x, "batch_norm");
  const int64_t R = shape.rows, C = shape.cols;
  check_param(x, mean, C, "batch_norm", "mean");
  check_param(x, rstd, C, "batch_norm", "rstd");
  check_param(x, gamma, C, "batch_norm", "gamma");
  check_param(x, beta, C, "batch_norm", "beta");
  TANDEM_DISPATCH_CUDA(x, batch_norm_apply(x, mean, rstd, gamma, beta));
  // Fold into y = x * a + b per channel.
  std::vector<float> a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    a[c] = rstd.data<float>()[c] * gamma.data<float>()[c];
    b[c] = beta.data<float>()[c] - mean.data<float>()[c] * a[c];
  }
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_floating(x.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.raw_data());
    T* out = static_cast<T*>(y.raw_data());
    parallel_for(R, std::max<int64_t>(1, detail::kPointwiseGrain / std::max<int64_t>(C, 1)),
                 [&](int64_t r0, int64_t r1) {
                   for (int64_t r = r0; r < r1; ++r) {
                     for (int64_t c = 0; c < C; ++c) {
                       out[r * C + c] = from_f32<T>(to_f32(in[r * C + c]) * a[c] + b[c]);
                     }
                   }
                 });
  });
  return y;
}

void update_running_moments(Tensor& running_mean, Tensor& running_var, const Moments& batch,
                            float momentum) {
  const int64_t C = batch.mean.numel();
  check_param(batch.mean, running_mean, C, "batch_norm", "running_mean");
  check_param(batch.mean, running_var, C, "batch_norm", "running_var");
  check_param(batch.mean, batch.variance, C, "batch_norm", "variance");
  TANDEM_DISPATCH_CUDA(batch.mean,
                       update_running_moments(running_mean, running_var, batch, momentum));
  if (momentum == 0.0f) return;  // unchanged, even where the batch's moments are not finite
  const double unbias =
      batch.count > 1 ? static_cast<double>(batch.count) / (batch.count - 1) : 1.0;
  float* rm = running_mean.data<float>();
  float* rv = running_var.data<float>();
  for (int64_t c = 0; c < C; ++c) {
    rm[c] = (1.0f - momentum) * rm[c] + momentum * batch.mean.data<float>()[c];
    rv[c] = static_cast<float>((1.0 - momentum) * rv[c] +
                               momentum * batch.variance.data<float>()[c] * unbias);
  }
}

bool batch_norm_fuses_relu(const Tensor& x) {
  return detail::batch_norm_supported(x);
}

BatchNormResult batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 Tensor& running_mean, Tensor& running_var, float momentum,
                                 float eps, bool relu) {
  Moments m;
  BatchNormResult result;
  if (detail::batch_norm_supported(x)) {
    check_param(x, gamma, x.dim(-1), "batch_norm", "gamma");
    check_param(x, beta, x.dim(-1), "batch_norm", "beta");
    detail::BatchNormForward f = detail::batch_norm_training(x, gamma, beta, eps, relu);
    m = {f.mean, f.variance, x.numel() / x.dim(-1)};
    result.y = f.y;
    result.relu_mask = f.relu_mask;
  } else {
    if (relu) {
      TANDEM_THROW(InvalidArgument, "batch_norm: no fused ReLU for ", x.to_string(),
                   " (batch_norm_fuses_relu)");
    }
    m = batch_norm_moments(x);
  }
  result.mean = m.mean;
  result.variance = m.variance;
  result.rstd = inverse_std(m.variance, eps);
  // y before the running moments: bad parameters throw with them unchanged.
  if (!result.y.defined()) result.y = batch_norm_apply(x, result.mean, result.rstd, gamma, beta);
  update_running_moments(running_mean, running_var, m, momentum);
  return result;
}

bool batch_norm_fuses_add_relu(const Tensor& x) {
  // Only where batch_norm_train runs the same row kernels: the composition's bits.
  return detail::batch_norm_supported(x) && detail::batch_norm_rows_apply(x);
}

BatchNormResult batch_norm_add_relu_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                          const Tensor& residual, Tensor& running_mean,
                                          Tensor& running_var, float momentum, float eps) {
  if (!batch_norm_fuses_add_relu(x)) {
    TANDEM_THROW(InvalidArgument, "batch_norm_add_relu: no fused kernel for ", x.to_string(),
                 " (batch_norm_fuses_add_relu)");
  }
  detail::check_matching("batch_norm_add_relu", x, residual);
  check_param(x, gamma, x.dim(-1), "batch_norm_add_relu", "gamma");
  check_param(x, beta, x.dim(-1), "batch_norm_add_relu", "beta");
  detail::BatchNormForward f =
      detail::batch_norm_rows_training(x, gamma, beta, eps, true, residual);
  update_running_moments(running_mean, running_var, {f.mean, f.variance, x.numel() / x.dim(-1)},
                         momentum);
  return {f.y, f.mean, f.variance, inverse_std(f.variance, eps), f.relu_mask};
}

BatchNormAddReluGrads batch_norm_add_relu_backward(const Tensor& dy, const Tensor& x,
                                                   const Tensor& mean, const Tensor& variance,
                                                   const Tensor& gamma, float eps,
                                                   const Tensor& relu_mask) {
  if (!batch_norm_fuses_add_relu(x)) {
    TANDEM_THROW(InvalidArgument, "batch_norm_add_relu_backward: no fused kernel for ",
                 x.to_string(), " (batch_norm_fuses_add_relu)");
  }
  detail::check_matching("batch_norm_add_relu_backward", dy, x);
  const int64_t C = x.dim(-1);
  check_param(x, mean, C, "batch_norm_add_relu_backward", "mean");
  check_param(x, variance, C, "batch_norm_add_relu_backward", "variance");
  check_param(x, gamma, C, "batch_norm_add_relu_backward", "gamma");
  if (!relu_mask.defined()) {
    TANDEM_THROW(InvalidArgument,
                 "batch_norm_add_relu_backward: the ReLU mask from batch_norm_add_relu_train is "
                 "missing");
  }
  BatchNormAddReluGrads grads;
  grads.norm = detail::batch_norm_rows_backward(dy, x, mean, variance, gamma, eps, relu_mask,
                                                &grads.residual);
  return grads;
}

Tensor batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& running_mean, const Tensor& running_var, float eps) {
  if (detail::batch_norm_supported(x)) {
    const int64_t C = x.dim(-1);
    check_param(x, gamma, C, "batch_norm", "gamma");
    check_param(x, beta, C, "batch_norm", "beta");
    check_param(x, running_mean, C, "batch_norm", "running_mean");
    check_param(x, running_var, C, "batch_norm", "running_var");
    return detail::batch_norm_with_stats(x, gamma, beta, running_mean, running_var, eps);
  }
  return batch_norm_apply(x, running_mean, inverse_std(running_var, eps), gamma, beta);
}

BatchNormSums batch_norm_backward_sums(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                       const Tensor& rstd) {
  const RowsCols shape = rows_cols(x, "batch_norm_backward");
  const int64_t R = shape.rows, C = shape.cols;
  check_dy(dy, x, "batch_norm_backward");
  check_param(x, mean, C, "batch_norm_backward", "mean");
  check_param(x, rstd, C, "batch_norm_backward", "rstd");
  TANDEM_DISPATCH_CUDA(x, batch_norm_backward_sums(dy, x, mean, rstd));
  const float* mu = mean.data<float>();
  const float* rs = rstd.data<float>();
  std::vector<double> sums;
  dispatch_floating(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x.raw_data());
    const T* gy = static_cast<const T*>(dy.raw_data());
    sums = reduce_rows(R, 2 * C, [&](int64_t r, double* acc) {
      for (int64_t c = 0; c < C; ++c) {
        const double g = to_f32(gy[r * C + c]);
        acc[c] += g;
        acc[C + c] += g * (to_f32(xs[r * C + c]) - mu[c]) * rs[c];
      }
    });
  });
  return {f32_vector({sums.begin(), sums.begin() + C}, x.device()),
          f32_vector({sums.begin() + C, sums.end()}, x.device())};
}

Tensor batch_norm_backward_dx(const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& rstd, const Tensor& gamma, const BatchNormSums& sums,
                              int64_t count) {
  const RowsCols shape = rows_cols(x, "batch_norm_backward");
  const int64_t R = shape.rows, C = shape.cols;
  check_dy(dy, x, "batch_norm_backward");
  check_param(x, mean, C, "batch_norm_backward", "mean");
  check_param(x, rstd, C, "batch_norm_backward", "rstd");
  check_param(x, gamma, C, "batch_norm_backward", "gamma");
  check_param(x, sums.sum_dy, C, "batch_norm_backward", "sum_dy");
  check_param(x, sums.sum_dy_xhat, C, "batch_norm_backward", "sum_dy_xhat");
  if (count <= 0) {
    TANDEM_THROW(InvalidArgument, "batch_norm_backward: ", count, " values per channel in x ",
                 x.to_string(), ", need at least one");
  }
  TANDEM_DISPATCH_CUDA(x, batch_norm_backward_dx(dy, x, mean, rstd, gamma, sums, count));
  const float* mu = mean.data<float>();
  const float* rs = rstd.data<float>();
  const float* g = gamma.data<float>();
  const float* sdy = sums.sum_dy.data<float>();
  const float* sdx = sums.sum_dy_xhat.data<float>();
  const float inv_count = 1.0f / static_cast<float>(count);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_floating(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x.raw_data());
    const T* gy = static_cast<const T*>(dy.raw_data());
    T* out = static_cast<T*>(dx.raw_data());
    parallel_for(R, std::max<int64_t>(1, detail::kPointwiseGrain / std::max<int64_t>(C, 1)),
                 [&](int64_t r0, int64_t r1) {
                   for (int64_t r = r0; r < r1; ++r) {
                     for (int64_t c = 0; c < C; ++c) {
                       const float xhat = (to_f32(xs[r * C + c]) - mu[c]) * rs[c];
                       out[r * C + c] = from_f32<T>(g[c] * rs[c] *
                                                    (to_f32(gy[r * C + c]) - sdy[c] * inv_count -
                                                     xhat * sdx[c] * inv_count));
                     }
                   }
                 });
  });
  return dx;
}

NormGrads batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& variance, const Tensor& gamma, float eps,
                              const Tensor& relu_mask) {
  detail::check_same_device("batch_norm_backward", x, {&dy});
  if (relu_mask.defined()) detail::check_same_device("batch_norm_backward", x, {&relu_mask});
  if (detail::batch_norm_supported(x) && dy.shape() == x.shape() && dy.dtype() == x.dtype()) {
    const int64_t C = x.dim(-1);
    check_param(x, mean, C, "batch_norm_backward", "mean");
    check_param(x, variance, C, "batch_norm_backward", "variance");
    check_param(x, gamma, C, "batch_norm_backward", "gamma");
    return detail::batch_norm_training_backward(dy, x, mean, variance, gamma, eps, relu_mask);
  }
  if (relu_mask.defined()) {
    TANDEM_THROW(InvalidArgument, "batch_norm_backward: a ReLU mask for ", x.to_string(),
                 " and dy ", dy.to_string(), ", which have no fused ReLU");
  }
  const Tensor rstd = inverse_std(variance, eps);
  BatchNormSums sums = batch_norm_backward_sums(dy, x, mean, rstd);
  NormGrads grads;
  const int64_t C = x.rank() > 0 ? x.dim(-1) : 0;
  grads.dx = batch_norm_backward_dx(dy, x, mean, rstd, gamma, sums, C > 0 ? x.numel() / C : 0);
  grads.dgamma = sums.sum_dy_xhat;
  grads.dbeta = sums.sum_dy;
  return grads;
}

}  // namespace tandem::kernels
