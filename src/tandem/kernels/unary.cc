#include "tandem/kernels/unary.h"

#include <cmath>

#include "tandem/kernels/detail/checks.h"
#include "tandem/kernels/detail/pointwise_map.h"

namespace tandem::kernels {
namespace {

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

// op'(x) from what unary_backward saves of it: x for log, y = op(x)
// otherwise.
float derivative(UnaryOp op, float saved) {
  switch (op) {
    case UnaryOp::exp:
      return saved;
    case UnaryOp::log:
      return 1.0f / saved;
    case UnaryOp::sigmoid:
      return saved * (1.0f - saved);
    case UnaryOp::tanh:
      return 1.0f - saved * saved;
    case UnaryOp::reciprocal:
      return -saved * saved;
  }
  return 0.0f;
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
  return detail::map_unary(x, unary_op_name(op).data(), [op](float v) { return apply(op, v); });
}

Tensor unary_backward(UnaryOp op, const Tensor& dy, const Tensor& x, const Tensor& y) {
  detail::check_matching("unary_backward", x, y);
  detail::check_same_device("unary_backward", x, {&dy});
  if (dy.shape() != x.shape()) {
    TANDEM_THROW(ShapeError, "unary_backward: dy ", dy.to_string(), " does not match x ",
                 x.to_string());
  }
  const Tensor& saved = op == UnaryOp::log ? x : y;
  const Tensor g = dy.dtype() == x.dtype() ? dy : dy.to(x.dtype());
  const Tensor dx = detail::map_binary(g, saved, unary_op_name(op).data(),
                                       [op](float d, float s) { return d * derivative(op, s); });
  return dy.dtype() == x.dtype() ? dx : dx.to(dy.dtype());
}

}  // namespace tandem::kernels
