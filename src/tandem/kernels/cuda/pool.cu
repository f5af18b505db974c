// Pooling on the device, channels-last: one thread per output element,
// channels fastest so that neighbouring threads read neighbouring memory.
// Backward passes gather, for each input element, the windows that cover
// it (no atomics: the result does not depend on scheduling). Max pooling's
// workspace is the index (h * W + w) of each window's first maximum, in
// i32 with y's shape; the CPU's is oneDNN's, so a workspace serves only the
// device that made it. Own kernels rather than cuDNN's: they are
// memory-bound either way, and these match the CPU's semantics exactly
// (padding never wins a max; averages divide by the whole window).

#include <cfloat>

#include "tandem/base/error.h"
#include "tandem/kernels/cuda/kernels.h"
#include "tandem/tensor/cuda/elements.cuh"
#include "tandem/tensor/cuda/runtime.h"

namespace tandem::cuda {
namespace {

using kernels::Pool2dGeometry;

constexpr unsigned int kThreads = 256;

// The geometry and sizes a kernel needs, passed by value.
struct Dims {
  int64_t N, H, W, C, OH, OW;
  int64_t kh, kw, sh, sw, ph, pw;
};

Dims dims_of(const Shape& x, const Shape& y, const Pool2dGeometry& g) {
  return {x[0],       x[1],       x[2],       x[3],       y[1],    y[2],
          g.kernel_h, g.kernel_w, g.stride_h, g.stride_w, g.pad_h, g.pad_w};
}

// Outputs o whose window o * stride - pad + [0, kernel) holds position p.
__device__ __forceinline__ void covering(int64_t p, int64_t stride, int64_t pad, int64_t kernel,
                                         int64_t outputs, int64_t& lo, int64_t& hi) {
  const int64_t shifted = p + pad - kernel + stride;
  lo = shifted > 0 ? shifted / stride : 0;
  hi = (p + pad) / stride;
  if (hi > outputs - 1) hi = outputs - 1;
}

template <typename T>
__global__ void max_pool_kernel(const T* x, T* y, int32_t* where, Dims d, int64_t n) {
  TANDEM_CUDA_FOR(i, n) {
    const int64_t c = i % d.C, ow = i / d.C % d.OW, oh = i / (d.C * d.OW) % d.OH,
                  b = i / (d.C * d.OW * d.OH);
    float best = -FLT_MAX;
    int32_t at = -1;
    for (int64_t kh = 0; kh < d.kh; ++kh) {
      const int64_t h = oh * d.sh - d.ph + kh;
      if (h < 0 || h >= d.H) continue;
      for (int64_t kw = 0; kw < d.kw; ++kw) {
        const int64_t w = ow * d.sw - d.pw + kw;
        if (w < 0 || w >= d.W) continue;
        const float v = load(x, ((b * d.H + h) * d.W + w) * d.C + c);
        if (at < 0 || v > best) {
          best = v;
          at = static_cast<int32_t>(h * d.W + w);
        }
      }
    }
    store(y, i, best);
    if (where != nullptr) where[i] = at;
  }
}

template <typename T>
__global__ void max_pool_backward_kernel(const T* dy, const int32_t* where, T* dx, Dims d,
                                         int64_t n) {
  TANDEM_CUDA_FOR(i, n) {
    const int64_t c = i % d.C, w = i / d.C % d.W, h = i / (d.C * d.W) % d.H,
                  b = i / (d.C * d.W * d.H);
    int64_t oh_lo, oh_hi, ow_lo, ow_hi;
    covering(h, d.sh, d.ph, d.kh, d.OH, oh_lo, oh_hi);
    covering(w, d.sw, d.pw, d.kw, d.OW, ow_lo, ow_hi);
    const auto self = static_cast<int32_t>(h * d.W + w);
    float acc = 0.0f;
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        const int64_t o = ((b * d.OH + oh) * d.OW + ow) * d.C + c;
        if (where[o] == self) acc += load(dy, o);
      }
    }
    store(dx, i, acc);
  }
}

template <typename T>
__global__ void avg_pool_kernel(const T* x, T* y, Dims d, float inv, int64_t n) {
  TANDEM_CUDA_FOR(i, n) {
    const int64_t c = i % d.C, ow = i / d.C % d.OW, oh = i / (d.C * d.OW) % d.OH,
                  b = i / (d.C * d.OW * d.OH);
    float acc = 0.0f;
    for (int64_t kh = 0; kh < d.kh; ++kh) {
      const int64_t h = oh * d.sh - d.ph + kh;
      if (h < 0 || h >= d.H) continue;
      for (int64_t kw = 0; kw < d.kw; ++kw) {
        const int64_t w = ow * d.sw - d.pw + kw;
        if (w >= 0 && w < d.W) acc += load(x, ((b * d.H + h) * d.W + w) * d.C + c);
      }
    }
    store(y, i, acc * inv);
  }
}

template <typename T>
__global__ void avg_pool_backward_kernel(const T* dy, T* dx, Dims d, float inv, int64_t n) {
  TANDEM_CUDA_FOR(i, n) {
    const int64_t c = i % d.C, w = i / d.C % d.W, h = i / (d.C * d.W) % d.H,
                  b = i / (d.C * d.W * d.H);
    int64_t oh_lo, oh_hi, ow_lo, ow_hi;
    covering(h, d.sh, d.ph, d.kh, d.OH, oh_lo, oh_hi);
    covering(w, d.sw, d.pw, d.kw, d.OW, ow_lo, ow_hi);
    float acc = 0.0f;
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        acc += load(dy, ((b * d.OH + oh) * d.OW + ow) * d.C + c);
      }
    }
    store(dx, i, acc * inv);
  }
}

// y (N, C): one thread per (n, c), adding the HW positions in order.
template <typename T>
__global__ void global_avg_pool_kernel(const T* x, T* y, int64_t HW, int64_t C, float inv,
                                       int64_t n) {
  TANDEM_CUDA_FOR(i, n) {
    const int64_t c = i % C, b = i / C;
    float acc = 0.0f;
    for (int64_t p = 0; p < HW; ++p) acc += load(x, (b * HW + p) * C + c);
    store(y, i, acc * inv);
  }
}

template <typename T>
__global__ void global_avg_pool_backward_kernel(const T* dy, T* dx, int64_t HW, int64_t C,
                                                float inv, int64_t n) {
  TANDEM_CUDA_FOR(i, n) {
    const int64_t c = i % C, b = i / (HW * C);
    store(dx, i, load(dy, b * C + c) * inv);
  }
}

template <typename Launch>
void launch(const Tensor& like, const char* op, int64_t n, Launch&& body) {
  if (n == 0) return;
  DeviceGuard guard(like.device());
  dispatch_float(like.dtype(), op, [&](auto* tag) {
    using T = Element<decltype(tag)>;
    body(static_cast<T*>(nullptr), blocks_for(n, kThreads), stream(like.device()));
  });
  check_launch(op);
}

template <typename T>
const T* in(const Tensor& t) {
  return static_cast<const T*>(t.device_data());
}
template <typename T>
T* out(Tensor& t) {
  return static_cast<T*>(t.device_data());
}

}  // namespace

kernels::MaxPoolResult max_pool2d_forward(const Tensor& x, const Pool2dGeometry& g, bool training) {
  const Shape ys = kernels::pool2d_output_shape(x.shape(), g);
  kernels::MaxPoolResult r;
  r.y = Tensor::empty(ys, x.dtype(), x.device());
  if (training) {
    r.workspace = Tensor::empty(ys, DType::i32, x.device(), MemoryCategory::activations);
  }
  const Dims d = dims_of(x.shape(), ys, g);
  launch(x, "max_pool2d", r.y.numel(), [&](auto* tag, unsigned int blocks, cudaStream_t st) {
    using T = std::remove_pointer_t<decltype(tag)>;
    max_pool_kernel<T><<<blocks, kThreads, 0, st>>>(
        in<T>(x), out<T>(r.y),
        training ? static_cast<int32_t*>(r.workspace.device_data()) : nullptr, d, r.y.numel());
  });
  return r;
}

Tensor max_pool2d_backward(const Tensor& dy, const Tensor& workspace, const Shape& x_shape,
                           const Pool2dGeometry& g) {
  // The workspace's layout is this file's forward's (the CPU's is a position in the window).
  if (workspace.dtype() != DType::i32 || workspace.shape() != dy.shape()) {
    TANDEM_THROW(ShapeError, "max_pool2d_backward: the workspace ", workspace.to_string(),
                 " is not the GPU forward's for dy ", dy.to_string(),
                 " (run the forward in training mode on the same device)");
  }
  Tensor dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
  const Dims d = dims_of(x_shape, dy.shape(), g);
  launch(dy, "max_pool2d_backward", dx.numel(),
         [&](auto* tag, unsigned int blocks, cudaStream_t st) {
           using T = std::remove_pointer_t<decltype(tag)>;
           max_pool_backward_kernel<T><<<blocks, kThreads, 0, st>>>(
               in<T>(dy), static_cast<const int32_t*>(workspace.device_data()), out<T>(dx), d,
               dx.numel());
         });
  return dx;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dGeometry& g) {
  const Shape ys = kernels::pool2d_output_shape(x.shape(), g);
  Tensor y = Tensor::empty(ys, x.dtype(), x.device());
  const Dims d = dims_of(x.shape(), ys, g);
  const float inv = 1.0f / static_cast<float>(g.kernel_h * g.kernel_w);
  launch(x, "avg_pool2d", y.numel(), [&](auto* tag, unsigned int blocks, cudaStream_t st) {
    using T = std::remove_pointer_t<decltype(tag)>;
    avg_pool_kernel<T><<<blocks, kThreads, 0, st>>>(in<T>(x), out<T>(y), d, inv, y.numel());
  });
  return y;
}

Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dGeometry& g) {
  Tensor dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
  const Dims d = dims_of(x_shape, dy.shape(), g);
  const float inv = 1.0f / static_cast<float>(g.kernel_h * g.kernel_w);
  launch(dy, "avg_pool2d_backward", dx.numel(),
         [&](auto* tag, unsigned int blocks, cudaStream_t st) {
           using T = std::remove_pointer_t<decltype(tag)>;
           avg_pool_backward_kernel<T>
               <<<blocks, kThreads, 0, st>>>(in<T>(dy), out<T>(dx), d, inv, dx.numel());
         });
  return dx;
}

Tensor global_avg_pool(const Tensor& x) {
  const int64_t N = x.dim(0), HW = x.dim(1) * x.dim(2), C = x.dim(3);
  Tensor y = Tensor::empty(Shape{N, C}, x.dtype(), x.device());
  const float inv = HW > 0 ? 1.0f / static_cast<float>(HW) : 0.0f;
  launch(x, "global_avg_pool", y.numel(), [&](auto* tag, unsigned int blocks, cudaStream_t st) {
    using T = std::remove_pointer_t<decltype(tag)>;
    global_avg_pool_kernel<T>
        <<<blocks, kThreads, 0, st>>>(in<T>(x), out<T>(y), HW, C, inv, y.numel());
  });
  return y;
}

Tensor global_avg_pool_backward(const Tensor& dy, const Shape& x_shape) {
  const int64_t HW = x_shape[1] * x_shape[2], C = x_shape[3];
  Tensor dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
  const float inv = HW > 0 ? 1.0f / static_cast<float>(HW) : 0.0f;
  launch(dy, "global_avg_pool_backward", dx.numel(),
         [&](auto* tag, unsigned int blocks, cudaStream_t st) {
           using T = std::remove_pointer_t<decltype(tag)>;
           global_avg_pool_backward_kernel<T>
               <<<blocks, kThreads, 0, st>>>(in<T>(dy), out<T>(dx), HW, C, inv, dx.numel());
         });
  return dx;
}

}  // namespace tandem::cuda
