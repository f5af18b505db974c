// Average pooling, channels-last, over f32 rows of channels.
#include <algorithm>
#include <vector>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/float_io.h"
#include "tandem/kernels/pool.h"

namespace tandem::kernels {
namespace {

void check_floating(const Tensor& x, const char* op) {
  detail::dispatch_floating(x.dtype(), op, [](auto) {});
}

// Loads channel row `index` of t (C elements) as floats.
void load_row(const Tensor& t, int64_t index, int64_t C, float* out) {
  convert_on_this_thread(static_cast<const char*>(t.raw_data()) +
                             static_cast<size_t>(index * C) * dtype_size(t.dtype()),
                         t.dtype(), out, DType::f32, C);
}

void store_row(const float* in, int64_t index, int64_t C, const Tensor& t) {
  convert_on_this_thread(
      in, DType::f32,
      static_cast<char*>(t.raw_data()) + static_cast<size_t>(index * C) * dtype_size(t.dtype()),
      t.dtype(), C);
}

// The input rows [begin, end) of one window along one axis.
struct Window {
  int64_t begin, end;
};

Window window(int64_t out, int64_t stride, int64_t pad, int64_t kernel, int64_t size) {
  const int64_t start = out * stride - pad;
  return {std::max<int64_t>(start, 0), std::min(start + kernel, size)};
}

}  // namespace

Tensor avg_pool2d(const Tensor& x, const Pool2dGeometry& g) {
  check_floating(x, "avg_pool2d");
  const Shape ys = pool2d_output_shape(x.shape(), g);
  TANDEM_DISPATCH_CUDA(x, avg_pool2d(x, g));
  Tensor y = Tensor::empty(ys, x.dtype(), x.device());
  const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3), OH = ys[1], OW = ys[2];
  const float inv = 1.0f / static_cast<float>(g.kernel_h * g.kernel_w);
  parallel_for(N * OH, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> in(static_cast<size_t>(C)), acc(static_cast<size_t>(C));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t n = r / OH, oh = r % OH;
      const Window wh = window(oh, g.stride_h, g.pad_h, g.kernel_h, H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const Window ww = window(ow, g.stride_w, g.pad_w, g.kernel_w, W);
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t h = wh.begin; h < wh.end; ++h) {
          for (int64_t w = ww.begin; w < ww.end; ++w) {
            load_row(x, (n * H + h) * W + w, C, in.data());
            for (int64_t c = 0; c < C; ++c)
              acc[static_cast<size_t>(c)] += in[static_cast<size_t>(c)];
          }
        }
        for (float& a : acc) a *= inv;
        store_row(acc.data(), (n * OH + oh) * OW + ow, C, y);
      }
    }
  });
  return y;
}

Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dGeometry& g) {
  check_floating(dy, "avg_pool2d_backward");
  const Shape ys = pool2d_output_shape(x_shape, g);
  if (dy.shape() != ys) {
    TANDEM_THROW(ShapeError, "avg_pool2d_backward: dy ", dy.shape().to_string(), " should be ",
                 ys.to_string());
  }
  TANDEM_DISPATCH_CUDA(dy, avg_pool2d_backward(dy, x_shape, g));
  Tensor dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
  const int64_t N = x_shape[0], H = x_shape[1], W = x_shape[2], C = x_shape[3], OH = ys[1],
                OW = ys[2];
  const float inv = 1.0f / static_cast<float>(g.kernel_h * g.kernel_w);
  // Each input row gathers the windows that cover it (no write conflicts).
  parallel_for(N * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> in(static_cast<size_t>(C)), acc(static_cast<size_t>(C));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t n = r / H, h = r % H;
      // Windows oh with oh*stride - pad <= h < oh*stride - pad + kernel.
      const int64_t oh_lo =
          std::max<int64_t>(0, (h + g.pad_h - g.kernel_h + g.stride_h) / g.stride_h);
      const int64_t oh_hi = std::min<int64_t>(OH - 1, (h + g.pad_h) / g.stride_h);
      for (int64_t w = 0; w < W; ++w) {
        const int64_t ow_lo =
            std::max<int64_t>(0, (w + g.pad_w - g.kernel_w + g.stride_w) / g.stride_w);
        const int64_t ow_hi = std::min<int64_t>(OW - 1, (w + g.pad_w) / g.stride_w);
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
          for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
            load_row(dy, (n * OH + oh) * OW + ow, C, in.data());
            for (int64_t c = 0; c < C; ++c)
              acc[static_cast<size_t>(c)] += in[static_cast<size_t>(c)];
          }
        }
        for (float& a : acc) a *= inv;
        store_row(acc.data(), (n * H + h) * W + w, C, dx);
      }
    }
  });
  return dx;
}

Tensor global_avg_pool(const Tensor& x) {
  check_floating(x, "global_avg_pool");
  if (x.rank() != 4)
    TANDEM_THROW(ShapeError, "global_avg_pool needs (N, H, W, C), got ", x.shape().to_string());
  TANDEM_DISPATCH_CUDA(x, global_avg_pool(x));
  const int64_t N = x.dim(0), HW = x.dim(1) * x.dim(2), C = x.dim(3);
  Tensor y = Tensor::empty(Shape{N, C}, x.dtype(), x.device());
  const float inv = HW > 0 ? 1.0f / static_cast<float>(HW) : 0.0f;
  parallel_for(N, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> in(static_cast<size_t>(C)), acc(static_cast<size_t>(C));
    for (int64_t n = begin; n < end; ++n) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t p = 0; p < HW; ++p) {
        load_row(x, n * HW + p, C, in.data());
        for (int64_t c = 0; c < C; ++c) acc[static_cast<size_t>(c)] += in[static_cast<size_t>(c)];
      }
      for (float& a : acc) a *= inv;
      store_row(acc.data(), n, C, y);
    }
  });
  return y;
}

Tensor global_avg_pool_backward(const Tensor& dy, const Shape& x_shape) {
  check_floating(dy, "global_avg_pool_backward");
  if (x_shape.rank() != 4 || dy.shape() != Shape{x_shape[0], x_shape[3]}) {
    TANDEM_THROW(ShapeError, "global_avg_pool_backward: dy ", dy.shape().to_string(),
                 " does not fit input ", x_shape.to_string());
  }
  TANDEM_DISPATCH_CUDA(dy, global_avg_pool_backward(dy, x_shape));
  const int64_t N = x_shape[0], HW = x_shape[1] * x_shape[2], C = x_shape[3];
  Tensor dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
  const float inv = HW > 0 ? 1.0f / static_cast<float>(HW) : 0.0f;
  parallel_for(N, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(C));
    for (int64_t n = begin; n < end; ++n) {
      load_row(dy, n, C, row.data());
      for (float& v : row) v *= inv;
      for (int64_t p = 0; p < HW; ++p) store_row(row.data(), n * HW + p, C, dx);
    }
  });
  return dx;
}

}  // namespace tandem::kernels
