#include "tandem/kernels/optimizer_update.h"

#include <cmath>

#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/target_clones.h"
#include "tandem/kernels/detail/dispatch.h"

namespace tandem::kernels {
namespace {

constexpr int64_t kGrain = 1 << 15;

// The update loops are memory-bound streams over the parameters and their
// state: written branch-free over non-aliasing arrays so that they compile to
// vector code for each ISA clone (the optimizer step was a fifth of an mlp
// bf16 training step as a scalar loop). This file is compiled without FMA
// contraction (src/CMakeLists.txt) so that every element rounds alike in the
// vector body and the scalar tail: a parameter updated alone (one device)
// and inside a ZeRO shard must agree to the bit.
TANDEM_TARGET_CLONES void sgd_loop(float* __restrict w, const float* __restrict g,
                                   float* __restrict buf, int64_t n, SgdUpdate s) {
  if (buf == nullptr) {
    for (int64_t j = 0; j < n; ++j) w[j] -= s.lr * (g[j] + s.decay * w[j]);
    return;
  }
  const float keep = s.first ? 0.0f : s.momentum;
  const float take = s.first ? 1.0f : 1.0f - s.dampening;
  const float look_ahead = s.nesterov ? s.momentum : 0.0f;
  if (s.nesterov) {
    for (int64_t j = 0; j < n; ++j) {
      const float d = g[j] + s.decay * w[j];
      buf[j] = keep * buf[j] + take * d;
      w[j] -= s.lr * (d + look_ahead * buf[j]);
    }
  } else {
    for (int64_t j = 0; j < n; ++j) {
      buf[j] = keep * buf[j] + take * (g[j] + s.decay * w[j]);
      w[j] -= s.lr * buf[j];
    }
  }
}

TANDEM_TARGET_CLONES void adam_loop(float* __restrict w, const float* __restrict g,
                                    float* __restrict m, float* __restrict v, int64_t n,
                                    AdamUpdate s) {
  for (int64_t j = 0; j < n; ++j) {
    const float d = g[j] + s.l2 * w[j];
    m[j] = s.b1 * m[j] + (1.0f - s.b1) * d;
    v[j] = s.b2 * v[j] + (1.0f - s.b2) * d * d;
    w[j] =
        w[j] * s.shrink - s.step_size * m[j] / (std::sqrt(v[j]) * s.inv_sqrt_correction2 + s.eps);
  }
}

void check_like(const char* op, const Tensor& w, const Tensor& t, const char* what) {
  if (t.dtype() != DType::f32 || t.numel() != w.numel() || t.device() != w.device()) {
    TANDEM_THROW(ShapeError, op, ": ", what, " ", t.to_string(), " does not match the weights ",
                 w.to_string());
  }
}

}  // namespace

void sgd_update(const Tensor& w, const Tensor& g, const Tensor& momentum, const SgdUpdate& s) {
  check_like("sgd_update", w, w, "weights");
  check_like("sgd_update", w, g, "gradient");
  if (momentum.defined()) check_like("sgd_update", w, momentum, "momentum");
  TANDEM_DISPATCH_CUDA(w, sgd_update(w, g, momentum, s));
  float* wp = w.data<float>();
  const float* gp = g.data<float>();
  float* buf = momentum.defined() ? momentum.data<float>() : nullptr;
  parallel_for(w.numel(), kGrain, [&](int64_t begin, int64_t end) {
    sgd_loop(wp + begin, gp + begin, buf != nullptr ? buf + begin : nullptr, end - begin, s);
  });
}

void adam_update(const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& v,
                 const AdamUpdate& s) {
  check_like("adam_update", w, w, "weights");
  check_like("adam_update", w, g, "gradient");
  check_like("adam_update", w, m, "first moment");
  check_like("adam_update", w, v, "second moment");
  TANDEM_DISPATCH_CUDA(w, adam_update(w, g, m, v, s));
  float* wp = w.data<float>();
  const float* gp = g.data<float>();
  float* mp = m.data<float>();
  float* vp = v.data<float>();
  parallel_for(w.numel(), kGrain, [&](int64_t begin, int64_t end) {
    adam_loop(wp + begin, gp + begin, mp + begin, vp + begin, end - begin, s);
  });
}

}  // namespace tandem::kernels
