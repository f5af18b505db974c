#include "tandem/nn/init.h"

#include <cmath>

#include "tandem/base/error.h"

namespace tandem::nn::init {
namespace {

float* f32_data(Tensor& tensor, const char* what) {
  if (tensor.dtype() != DType::f32) {
    TANDEM_THROW(ShapeError, "init::", what, " needs an f32 tensor, got ", tensor.to_string());
  }
  return tensor.data<float>();
}

void check_fan(int64_t fan, const char* what) {
  if (fan <= 0) TANDEM_THROW(InvalidArgument, "init::", what, ": fan must be positive, got ", fan);
}

// Draws on the host, from the same generator whatever the device, so that a
// model initialises to the same values on a GPU as on the CPU.
template <typename Draw>
void draw_on_host(Tensor& tensor, const char* what, Draw draw) {
  if (tensor.device().kind == DeviceKind::cpu) return draw(f32_data(tensor, what));
  Tensor host = Tensor::empty(tensor.shape(), tensor.dtype(), cpu_device(), tensor.category());
  draw(f32_data(host, what));
  tensor.copy_from(host);
}

}  // namespace

void uniform(Tensor& tensor, float low, float high, Generator& generator) {
  draw_on_host(tensor, "uniform",
               [&](float* data) { generator.uniform(data, tensor.numel(), low, high); });
}

void normal(Tensor& tensor, float mean, float stddev, Generator& generator) {
  draw_on_host(tensor, "normal",
               [&](float* data) { generator.normal(data, tensor.numel(), mean, stddev); });
}

void kaiming_uniform(Tensor& tensor, int64_t fan_in, float a, Generator& generator) {
  check_fan(fan_in, "kaiming_uniform");
  const double gain = std::sqrt(2.0 / (1.0 + static_cast<double>(a) * a));
  const auto bound = static_cast<float>(gain * std::sqrt(3.0 / static_cast<double>(fan_in)));
  uniform(tensor, -bound, bound, generator);
}

void xavier_uniform(Tensor& tensor, int64_t fan_in, int64_t fan_out, Generator& generator) {
  check_fan(fan_in, "xavier_uniform");
  check_fan(fan_out, "xavier_uniform");
  const auto bound = static_cast<float>(std::sqrt(6.0 / static_cast<double>(fan_in + fan_out)));
  uniform(tensor, -bound, bound, generator);
}

}  // namespace tandem::nn::init
