#include "tandem/kernels/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/checks.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/float_io.h"

namespace tandem::kernels {
namespace {

using detail::dispatch_floating;

// Calls row(in, out, n) for every row of the last dimension, the rows given
// as f32 buffers (16-bit storage converted in and out); a (and b, of a's
// shape and dtype) checked by the caller.
template <typename Row>
Tensor map_rows(const Tensor& a, const Tensor* b, const char* op, Row row) {
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  const int64_t n = a.dim(a.rank() - 1);
  if (a.numel() == 0) return out;
  const int64_t rows = a.numel() / n;
  const size_t element = dtype_size(a.dtype());
  dispatch_floating(a.dtype(), op, [&](auto) {
    parallel_for(rows, std::max<int64_t>(1, detail::kPointwiseGrain / n),
                 [&](int64_t begin, int64_t end) {
                   std::vector<float> va(static_cast<size_t>(n)),
                       vb(b != nullptr ? static_cast<size_t>(n) : 0), vo(static_cast<size_t>(n));
                   for (int64_t r = begin; r < end; ++r) {
                     const size_t at = static_cast<size_t>(r * n) * element;
                     convert_on_this_thread(static_cast<const char*>(a.raw_data()) + at, a.dtype(),
                                            va.data(), DType::f32, n);
                     if (b != nullptr)
                       convert_on_this_thread(static_cast<const char*>(b->raw_data()) + at,
                                              a.dtype(), vb.data(), DType::f32, n);
                     row(va.data(), vb.data(), vo.data(), n);
                     convert_on_this_thread(vo.data(), DType::f32,
                                            static_cast<char*>(out.raw_data()) + at, a.dtype(), n);
                   }
                 });
  });
  return out;
}

// max and log(sum(exp(x - max))) of a row, the sum in double.
std::pair<float, float> max_and_log_sum(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i] - m));
  return {m, static_cast<float>(std::log(s))};
}

}  // namespace

Tensor softmax(const Tensor& x) {
  detail::check_rows("softmax", x);
  TANDEM_DISPATCH_CUDA(x, softmax(x));
  return map_rows(x, nullptr, "softmax", [](const float* in, const float*, float* out, int64_t n) {
    // (x - m) - log_sum: m + log_sum rounded to f32 would lose log_sum's
    // low bits where m is large (rows near 1e6 gave 0.3247 for a third).
    const auto [m, log_sum] = max_and_log_sum(in, n);
    for (int64_t i = 0; i < n; ++i) out[i] = std::exp((in[i] - m) - log_sum);
  });
}

Tensor softmax_backward(const Tensor& dy, const Tensor& y) {
  detail::check_rows("softmax_backward", dy);
  detail::check_matching("softmax_backward", dy, y);
  TANDEM_DISPATCH_CUDA(dy, softmax_backward(dy, y));
  return map_rows(dy, &y, "softmax_backward",
                  [](const float* g, const float* yv, float* out, int64_t n) {
                    double dot = 0.0;
                    for (int64_t i = 0; i < n; ++i) dot += static_cast<double>(g[i]) * yv[i];
                    const float d = static_cast<float>(dot);
                    for (int64_t i = 0; i < n; ++i) out[i] = yv[i] * (g[i] - d);
                  });
}

Tensor log_softmax(const Tensor& x) {
  detail::check_rows("log_softmax", x);
  TANDEM_DISPATCH_CUDA(x, log_softmax(x));
  return map_rows(x, nullptr, "log_softmax",
                  [](const float* in, const float*, float* out, int64_t n) {
                    const auto [m, log_sum] = max_and_log_sum(in, n);
                    for (int64_t i = 0; i < n; ++i) out[i] = (in[i] - m) - log_sum;
                  });
}

Tensor log_softmax_backward(const Tensor& dy, const Tensor& y) {
  detail::check_rows("log_softmax_backward", dy);
  detail::check_matching("log_softmax_backward", dy, y);
  TANDEM_DISPATCH_CUDA(dy, log_softmax_backward(dy, y));
  return map_rows(dy, &y, "log_softmax_backward",
                  [](const float* g, const float* yv, float* out, int64_t n) {
                    double total = 0.0;
                    for (int64_t i = 0; i < n; ++i) total += g[i];
                    const float t = static_cast<float>(total);
                    for (int64_t i = 0; i < n; ++i) out[i] = g[i] - std::exp(yv[i]) * t;
                  });
}

}  // namespace tandem::kernels
