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

double measure_matmul_peak(DType dtype, int64_t n, double min_seconds) {
  if (dtype != DType::f32 && dtype != DType::bf16)
    TANDEM_THROW(InvalidArgument, "peak matmul rate: dtype must be f32 or bf16, got ",
                 dtype_name(dtype));
  if (n < 1) TANDEM_THROW(InvalidArgument, "peak matmul rate: size must be positive, got ", n);
  MemoryCategoryScope scratch(MemoryCategory::workspace);  // not the model's activations
  const Tensor a = Tensor::full(Shape{n, n}, 0.5f, DType::f32).to(dtype);
  const Tensor b = Tensor::full(Shape{n, n}, 0.25f, DType::f32).to(dtype);
  Tensor out = Tensor::empty(Shape{n, n}, DType::f32);
  matmul_into(a, b, {}, out);  // primitive creation and first touch, untimed
  const double flops =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  double best = 0.0, total = 0.0;
  for (int i = 0; i < 3 || total < min_seconds; ++i) {
    const auto start = std::chrono::steady_clock::now();
    matmul_into(a, b, {}, out);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    total += seconds;
    best = std::max(best, flops / seconds);
  }
  return best;
}

}  // namespace tandem::kernels
