#include "tandem/kernels/flops.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "tandem/base/error.h"
#include "tandem/kernels/matmul.h"

namespace tandem::kernels {
namespace {
std::atomic<int64_t> counted{0};
}  // namespace

int64_t flops_executed() {
  return counted.load(std::memory_order_relaxed);
}

void count_flops(int64_t flops) {
  counted.fetch_add(flops, std::memory_order_relaxed);
}

double measure_matmul_peak(DType dtype, int64_t n, double min_seconds, Device device) {
  if (dtype != DType::f32 && dtype != DType::bf16)
    TANDEM_THROW(InvalidArgument, "peak matmul rate: dtype must be f32 or bf16, got ",
                 dtype_name(dtype));
  if (n < 1) TANDEM_THROW(InvalidArgument, "peak matmul rate: size must be positive, got ", n);
  MemoryCategoryScope scratch(MemoryCategory::workspace);  // not the model's activations
  const Tensor a = Tensor::full(Shape{n, n}, 0.5f, DType::f32, device).to(dtype);
  const Tensor b = Tensor::full(Shape{n, n}, 0.25f, DType::f32, device).to(dtype);
  Tensor out = Tensor::empty(Shape{n, n}, DType::f32, device);
  const double flops =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  // Primitive (or plan) creation and first touch, untimed; on a GPU this
  // also sizes a repeat: products queued back to back for about 20 ms.
  auto start = std::chrono::steady_clock::now();
  matmul_into(a, b, {}, out);
  synchronize(device);
  int per_repeat = 1;
  if (device.kind != DeviceKind::cpu) {
    start = std::chrono::steady_clock::now();
    matmul_into(a, b, {}, out);
    synchronize(device);
    const double one =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    per_repeat = static_cast<int>(std::clamp(0.02 / std::max(one, 1e-9), 1.0, 10000.0));
  }
  double best = 0.0, total = 0.0;
  for (int i = 0; i < 3 || total < min_seconds; ++i) {
    start = std::chrono::steady_clock::now();
    for (int j = 0; j < per_repeat; ++j) matmul_into(a, b, {}, out);
    synchronize(device);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    total += seconds;
    best = std::max(best, flops * per_repeat / seconds);
  }
  return best;
}

}  // namespace tandem::kernels
