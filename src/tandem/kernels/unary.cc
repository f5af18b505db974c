#include "tandem/kernels/unary.h"

#include <cmath>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/float_io.h"

namespace tandem::kernels {
namespace {

using detail::dispatch_floating;
using detail::from_f32;
using detail::to_f32;

float apply(UnaryOp op, float x) {
  switch (op) {
    case UnaryOp::exp:
      return std::exp(x);
    case UnaryOp::log:
      return std::log(x);
    case UnaryOp::sigmoid:
      // Either form keeps exp's argument <= 0: no overflow for large |x|.
      return x >= 0.0f ? 1.0f / (1.0f + std::exp(-x)) : std::exp(x) / (1.0f + std::exp(x));
    case UnaryOp::tanh:
      return std::tanh(x);
    case UnaryOp::reciprocal:
      return 1.0f / x;
  }
  return x;
}

// op'(x) from x and y = op(x).
float derivative(UnaryOp op, float x, float y) {
  switch (op) {
    case UnaryOp::exp:
      return y;
    case UnaryOp::log:
      return 1.0f / x;
    case UnaryOp::sigmoid:
      return y * (1.0f - y);
    case UnaryOp::tanh:
      return 1.0f - y * y;
    case UnaryOp::reciprocal:
      return -y * y;
  }
  return 0.0f;
}

void check_same_shape(const char* what, const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) {
    TANDEM_THROW(ShapeError, what, ": shapes differ: ", a.shape().to_string(), " and ",
                 b.shape().to_string());
  }
}

}  // namespace

std::string_view unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::exp:
      return "exp";
    case UnaryOp::log:
      return "log";
    case UnaryOp::sigmoid:
      return "sigmoid";
    case UnaryOp::tanh:
      return "tanh";
    case UnaryOp::reciprocal:
      return "reciprocal";
  }
  return "unary";
}

Tensor unary(UnaryOp op, const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_floating(x.dtype(), unary_op_name(op), [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.raw_data());
    T* out = static_cast<T*>(y.raw_data());
    parallel_for(x.numel(), detail::kPointwiseGrain, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) out[i] = from_f32<T>(apply(op, to_f32(in[i])));
    });
  });
  return y;
}

Tensor unary_backward(UnaryOp op, const Tensor& dy, const Tensor& x, const Tensor& y) {
  check_same_shape("unary_backward", dy, x);
  check_same_shape("unary_backward", x, y);
  if (x.dtype() != y.dtype()) {
    TANDEM_THROW(ShapeError, "unary_backward: x is ", dtype_name(x.dtype()), " but y is ",
                 dtype_name(y.dtype()));
  }
  const Tensor g = dy.dtype() == x.dtype() ? dy : dy.to(x.dtype());
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_floating(x.dtype(), unary_op_name(op), [&](auto tag) {
    using T = decltype(tag);
    const T* gp = static_cast<const T*>(g.raw_data());
    const T* xp = static_cast<const T*>(x.raw_data());
    const T* yp = static_cast<const T*>(y.raw_data());
    T* out = static_cast<T*>(dx.raw_data());
    parallel_for(x.numel(), detail::kPointwiseGrain, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        out[i] = from_f32<T>(to_f32(gp[i]) * derivative(op, to_f32(xp[i]), to_f32(yp[i])));
      }
    });
  });
  return dy.dtype() == x.dtype() ? dx : dx.to(dy.dtype());
}

}  // namespace tandem::kernels
