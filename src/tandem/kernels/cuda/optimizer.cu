// The optimizers' update arithmetic on the device: one pass over each
// parameter, its gradient and its state, the same formulas as the CPU loops
// (kernels/optimizer_update.cc).
#include "tandem/kernels/cuda/kernels.h"
#include "tandem/tensor/cuda/elements.cuh"
#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

constexpr unsigned int kThreads = 256;

__global__ void sgd_kernel(float* w, const float* g, float* buf, int64_t n, kernels::SgdUpdate s) {
  const float keep = s.first ? 0.0f : s.momentum;
  const float take = s.first ? 1.0f : 1.0f - s.dampening;
  TANDEM_CUDA_FOR(j, n) {
    const float d = g[j] + s.decay * w[j];
    if (buf == nullptr) {
      w[j] -= s.lr * d;
    } else {
      const float b = keep * buf[j] + take * d;
      buf[j] = b;
      w[j] -= s.lr * (s.nesterov ? d + s.momentum * b : b);
    }
  }
}

__global__ void adam_kernel(float* w, const float* g, float* m, float* v, int64_t n,
                            kernels::AdamUpdate s) {
  TANDEM_CUDA_FOR(j, n) {
    const float d = g[j] + s.l2 * w[j];
    const float mj = s.b1 * m[j] + (1.0f - s.b1) * d;
    const float vj = s.b2 * v[j] + (1.0f - s.b2) * d * d;
    m[j] = mj;
    v[j] = vj;
    w[j] = w[j] * s.shrink - s.step_size * mj / (sqrtf(vj) * s.inv_sqrt_correction2 + s.eps);
  }
}

}  // namespace

void sgd_update(const Tensor& w, const Tensor& g, const Tensor& momentum,
                const kernels::SgdUpdate& s) {
  const int64_t n = w.numel();
  if (n == 0) return;
  DeviceGuard guard(w.device());
  sgd_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream(w.device())>>>(
      static_cast<float*>(w.device_data()), static_cast<const float*>(g.device_data()),
      momentum.defined() ? static_cast<float*>(momentum.device_data()) : nullptr, n, s);
  check_launch("sgd_update");
}

void adam_update(const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& v,
                 const kernels::AdamUpdate& s) {
  const int64_t n = w.numel();
  if (n == 0) return;
  DeviceGuard guard(w.device());
  adam_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream(w.device())>>>(
      static_cast<float*>(w.device_data()), static_cast<const float*>(g.device_data()),
      static_cast<float*>(m.device_data()), static_cast<float*>(v.device_data()), n, s);
  check_launch("adam_update");
}

}  // namespace tandem::cuda
