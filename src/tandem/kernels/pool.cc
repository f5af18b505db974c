// Max pooling, channels-last, in f32, bf16 and f16 storage: each window's
// channels compared as floats in vector-wide chunks. The workspace a
// training-mode forward returns holds where each maximum came from, as its
// position in the window (row-major over kernel_h x kernel_w, padding
// counted): one byte where the window has at most 255 positions, four
// otherwise; all ones where a fused ReLU zeroed the maximum. (oneDNN 2.6's
// pooling ran at 4-5 GB/s on an AMX Xeon, a quarter of the cnn's bf16
// step; docs/performance.md.)
#include "tandem/kernels/pool.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "tandem/base/parallel.h"
#include "tandem/base/target_clones.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/kernels/detail/checks.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/float_io.h"
#include "tandem/kernels/detail/max_pool_rows.h"

namespace tandem::kernels {
namespace {

using detail::Bf16;
using detail::F16;
using detail::from_f32;
using detail::load16;
using detail::store16;
using detail::to_f32;

std::string geometry_key(const Pool2dGeometry& g) {
  return tandem::detail::concat("k", g.kernel_h, ",", g.kernel_w, "s", g.stride_h, ",", g.stride_w,
                                "p", g.pad_h, ",", g.pad_w);
}

DType workspace_dtype(const Pool2dGeometry& g) {
  return g.kernel_h * g.kernel_w < 256 ? DType::u8 : DType::i32;
}

// A workspace entry for a window whose maximum the fused ReLU zeroed: no
// position, so the backward routes nothing from it (all ones: 255 in u8,
// whose windows have at most 255 positions, -1 in i32).
template <typename Index>
constexpr Index kNoPosition = static_cast<Index>(-1);

struct PoolDims {
  int64_t H, W, C, OH, OW;
  Pool2dGeometry g;
  bool relu = false;  // y = max(maximum, 0) (max_pool2d_forward's relu)
};

PoolDims dims_of(const Shape& x, const Shape& y, const Pool2dGeometry& g, bool relu = false) {
  return {x[1], x[2], x[3], y[1], y[2], g, relu};
}

// Channels compared at once: four AVX-512 vectors of floats.
constexpr int64_t kChunk = 64;

// Whether the AVX-512 loops below take this storage and position width:
// f32 or bf16 values (not f16), u8 positions.
template <typename T, typename Index>
constexpr bool kVectorPool = std::is_same_v<Index, uint8_t> && !std::is_same_v<T, F16>;

// A run of `count` 2x2 windows inside the image (the common pooling),
// window_stride elements apart, 16 channels at a time in AVX-512
// registers, for f32 and bf16 storage and u8 positions: the general loop
// below keeps its running maxima in memory (5 GB/s in bf16 on an AMX
// Xeon; GCC left vector-extension versions of it scalar), and a call per
// window cost the cnn's 32 channels more than the comparisons. Returns the
// channels done in each window (a multiple of 16; the caller does the
// rest).
template <typename T>
TANDEM_AVX512 int64_t max_of_four_avx512(const T* top, int64_t row_stride, int64_t window_stride,
                                         int64_t C, int64_t count, T* y, uint8_t* where,
                                         bool relu) {
  const int64_t vector_channels = C / 16 * 16;
  for (int64_t window = 0; window < count; ++window) {
    // Maxima are input values: storing bf16 rounds nothing.
    const T* t = top + window * window_stride;
    const T* bottom = t + row_stride;
    T* yw = y + window * C;
    for (int64_t c = 0; c < vector_channels; c += 16) {
      const __m512 candidates[3] = {load16(t + C + c), load16(bottom + c), load16(bottom + C + c)};
      __m512 best = load16(t + c);
      __m512i at = _mm512_setzero_si512();
      for (int k = 0; k < 3; ++k) {
        // The first maximum wins ties; a NaN wins and stays.
        const __mmask16 take = _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q) &
                               _mm512_cmp_ps_mask(candidates[k], best, _CMP_NLE_UQ);
        best = _mm512_mask_mov_ps(best, take, candidates[k]);
        at = _mm512_mask_mov_epi32(at, take, _mm512_set1_epi32(k + 1));
      }
      if (relu) {
        // relu's x > 0 ? x : +0 (a NaN gives +0), and no position where zeroed.
        const __mmask16 positive = _mm512_cmp_ps_mask(best, _mm512_setzero_ps(), _CMP_GT_OQ);
        best = _mm512_maskz_mov_ps(positive, best);
        at = _mm512_mask_mov_epi32(_mm512_set1_epi32(kNoPosition<uint8_t>), positive, at);
      }
      store16(yw + c, best);
      if (where != nullptr) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(where + window * C + c),
                         _mm512_cvtepi32_epi8(at));
      }
    }
  }
  return vector_channels;
}

template <typename T, typename Index>
int64_t max_of_four(const T* top, int64_t row_stride, int64_t window_stride, int64_t C,
                    int64_t count, T* y, Index* where, bool relu) {
  if constexpr (kVectorPool<T, Index>) {
    if (detail::has_avx512())
      return max_of_four_avx512(top, row_stride, window_stride, C, count, y, where, relu);
  }
  return 0;
}

// Output row (n, oh): every window's maximum and, with `where`, its position.
template <typename T, typename Index>
[[gnu::always_inline]] inline void max_pool_row_body(const T* __restrict x, T* __restrict y,
                                                     Index* __restrict where, const PoolDims& d,
                                                     int64_t n, int64_t oh) {
  const Pool2dGeometry& g = d.g;
  const int64_t h0 = oh * g.stride_h - g.pad_h;
  const int64_t hb = std::max<int64_t>(h0, 0), he = std::min(h0 + g.kernel_h, d.H);
  const int64_t row_out = (n * d.OH + oh) * d.OW * d.C;
  // The 2x2 windows inside the image, [inner_begin, inner_end), in one run.
  int64_t inner_begin = 0, inner_end = 0, inner_done = 0;
  if (g.kernel_h == 2 && g.kernel_w == 2 && hb == h0 && he == h0 + 2 && d.W >= 2) {
    inner_begin = (g.pad_w + g.stride_w - 1) / g.stride_w;
    inner_end = std::min(d.OW, (d.W - 2 + g.pad_w) / g.stride_w + 1);
  }
  if (inner_begin < inner_end) {
    const int64_t w0 = inner_begin * g.stride_w - g.pad_w;
    const int64_t out = row_out + inner_begin * d.C;
    inner_done = max_of_four(x + ((n * d.H + h0) * d.W + w0) * d.C, d.W * d.C, g.stride_w * d.C,
                             d.C, inner_end - inner_begin, y + out,
                             where == nullptr ? nullptr : where + out, d.relu);
  }
  for (int64_t ow = 0; ow < d.OW; ++ow) {
    const int64_t w0 = ow * g.stride_w - g.pad_w;
    const int64_t wb = std::max<int64_t>(w0, 0), we = std::min(w0 + g.kernel_w, d.W);
    const int64_t out = row_out + ow * d.C;
    const int64_t done = ow >= inner_begin && ow < inner_end ? inner_done : 0;
    for (int64_t c0 = done; c0 < d.C; c0 += kChunk) {
      const int64_t len = std::min(kChunk, d.C - c0);
      float best[kChunk];
      int32_t at[kChunk];
      // A window whose values are all -inf keeps its first position in the
      // image (PyTorch's): position 0 may lie in the padding.
      const auto first = static_cast<int32_t>((hb - h0) * g.kernel_w + (wb - w0));
      for (int64_t k = 0; k < kChunk; ++k) {
        best[k] = -std::numeric_limits<float>::infinity();
        at[k] = first;
      }
      for (int64_t h = hb; h < he; ++h) {
        for (int64_t w = wb; w < we; ++w) {
          const T* row = x + ((n * d.H + h) * d.W + w) * d.C + c0;
          const auto pos = static_cast<int32_t>((h - h0) * g.kernel_w + (w - w0));
          for (int64_t k = 0; k < len; ++k) {
            // The first maximum wins ties; a NaN wins and stays.
            const float v = to_f32(row[k]);
            const bool take = best[k] == best[k] && !(v <= best[k]);
            best[k] = take ? v : best[k];
            at[k] = take ? pos : at[k];
          }
        }
      }
      if (d.relu) {
        for (int64_t k = 0; k < len; ++k) {
          const bool positive = best[k] > 0.0f;  // relu's test: a NaN gives +0
          best[k] = positive ? best[k] : 0.0f;
          at[k] = positive ? at[k] : static_cast<int32_t>(kNoPosition<Index>);
        }
      }
      for (int64_t k = 0; k < len; ++k) y[out + c0 + k] = from_f32<T>(best[k]);
      if (where != nullptr) {
        for (int64_t k = 0; k < len; ++k) where[out + c0 + k] = static_cast<Index>(at[k]);
      }
    }
  }
}

// dx for output row (n, oh) where the windows tile x exactly (stride ==
// kernel, no padding, nothing left over): each x position is in one window,
// so dx is written once, dy where the maximum was and 0 elsewhere. Values
// are only copied, so they move as their bits (the compiler vectorises a
// select of integers, not of the Bf16/F16 wrappers).
template <typename T, typename Index>
[[gnu::always_inline]] inline void max_pool_tile_backward_body(const T* dy_values,
                                                               const Index* __restrict where,
                                                               T* dx_values, const PoolDims& d,
                                                               int64_t n, int64_t oh) {
  using Bits = detail::StorageBits<T>;
  const auto* __restrict dy = reinterpret_cast<const Bits*>(dy_values);
  auto* __restrict dx = reinterpret_cast<Bits*>(dx_values);
  const Pool2dGeometry& g = d.g;
  for (int64_t ow = 0; ow < d.OW; ++ow) {
    const int64_t out = ((n * d.OH + oh) * d.OW + ow) * d.C;
    for (int64_t i = 0; i < g.kernel_h; ++i) {
      for (int64_t j = 0; j < g.kernel_w; ++j) {
        const int64_t h = oh * g.kernel_h + i, w = ow * g.kernel_w + j;
        Bits* row = dx + ((n * d.H + h) * d.W + w) * d.C;
        const auto pos = static_cast<Index>(i * g.kernel_w + j);
        for (int64_t c = 0; c < d.C; ++c) {
          const auto keep = static_cast<Bits>(-static_cast<Bits>(where[out + c] == pos));
          row[c] = static_cast<Bits>(dy[out + c] & keep);
        }
      }
    }
  }
}

// max_pool_tile_backward_body for 2x2 windows, u8 positions, f32 or bf16
// storage and channels a multiple of 16, in AVX-512 registers: dx's two
// rows written in order, 16 channels per mask (the compiled loop above
// ran at 12 GB/s on the cnn's pool1 in bf16 on Zen 4).
template <typename T>
TANDEM_AVX512 void tile_backward_four_avx512(const T* dy_values, const uint8_t* where, T* dx_values,
                                             const PoolDims& d, int64_t n, int64_t oh) {
  using Bits = detail::StorageBits<T>;
  const auto* dy = reinterpret_cast<const Bits*>(dy_values);
  auto* dx = reinterpret_cast<Bits*>(dx_values);
  const int64_t first_out = (n * d.OH + oh) * d.OW * d.C;
  for (int64_t i = 0; i < 2; ++i) {
    Bits* row = dx + (n * d.H + 2 * oh + i) * d.W * d.C;
    for (int64_t ow = 0; ow < d.OW; ++ow) {
      for (int64_t c = 0; c < d.C; c += 16) {
        const int64_t out = first_out + ow * d.C + c;
        const __m512i at =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(where + out)));
        __m512i grad;
        if constexpr (sizeof(Bits) == 4) {
          grad = _mm512_loadu_si512(dy + out);
        } else {
          grad =
              _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(dy + out)));
        }
        for (int64_t j = 0; j < 2; ++j) {
          const __mmask16 here =
              _mm512_cmpeq_epi32_mask(at, _mm512_set1_epi32(static_cast<int>(2 * i + j)));
          const __m512i kept = _mm512_maskz_mov_epi32(here, grad);
          Bits* to = row + (2 * ow + j) * d.C + c;
          if constexpr (sizeof(Bits) == 4) {
            _mm512_storeu_si512(to, kept);
          } else {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), _mm512_cvtepi32_epi16(kept));
          }
        }
      }
    }
  }
}

// Whether tile_backward_four_avx512 takes these windows.
template <typename T, typename Index>
bool tile_backward_four_applies(const PoolDims& d) {
  return kVectorPool<T, Index> && d.g.kernel_h == 2 && d.g.kernel_w == 2 && d.C % 16 == 0 &&
         detail::has_avx512();
}

#define TANDEM_MAX_POOL_ROWS(T, Index)                                                         \
  TANDEM_TARGET_CLONES void max_pool_row(const T* x, T* y, Index* where, const PoolDims& d,    \
                                         int64_t n, int64_t oh) {                              \
    max_pool_row_body(x, y, where, d, n, oh);                                                  \
  }                                                                                            \
  TANDEM_TARGET_CLONES void max_pool_tile_backward(const T* dy, const Index* where, T* dx,     \
                                                   const PoolDims& d, int64_t n, int64_t oh) { \
    max_pool_tile_backward_body(dy, where, dx, d, n, oh);                                      \
  }
TANDEM_MAX_POOL_ROWS(float, uint8_t)
TANDEM_MAX_POOL_ROWS(Bf16, uint8_t)
TANDEM_MAX_POOL_ROWS(F16, uint8_t)
TANDEM_MAX_POOL_ROWS(float, int32_t)
TANDEM_MAX_POOL_ROWS(Bf16, int32_t)
TANDEM_MAX_POOL_ROWS(F16, int32_t)
#undef TANDEM_MAX_POOL_ROWS

// dx where windows overlap or leave positions out: summed in f32 per image
// (windows of different images never meet), then stored.
template <typename T, typename Index>
void max_pool_scatter_backward(const T* dy, const Index* where, T* dx, const PoolDims& d,
                               int64_t N) {
  const Pool2dGeometry& g = d.g;
  const int64_t image = d.H * d.W * d.C;
  parallel_for(N, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> sum(static_cast<size_t>(image));
    for (int64_t n = begin; n < end; ++n) {
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (int64_t oh = 0; oh < d.OH; ++oh) {
        for (int64_t ow = 0; ow < d.OW; ++ow) {
          const int64_t out = ((n * d.OH + oh) * d.OW + ow) * d.C;
          for (int64_t c = 0; c < d.C; ++c) {
            if (where[out + c] == kNoPosition<Index>) continue;
            const int64_t pos = static_cast<int64_t>(where[out + c]);
            const int64_t h = oh * g.stride_h - g.pad_h + pos / g.kernel_w;
            const int64_t w = ow * g.stride_w - g.pad_w + pos % g.kernel_w;
            sum[static_cast<size_t>((h * d.W + w) * d.C + c)] += to_f32(dy[out + c]);
          }
        }
      }
      T* dst = dx + n * image;
      for (int64_t i = 0; i < image; ++i) dst[i] = from_f32<T>(sum[static_cast<size_t>(i)]);
    }
  });
}

bool windows_tile(const PoolDims& d) {
  const Pool2dGeometry& g = d.g;
  return g.stride_h == g.kernel_h && g.stride_w == g.kernel_w && g.pad_h == 0 && g.pad_w == 0 &&
         d.OH * g.kernel_h == d.H && d.OW * g.kernel_w == d.W;
}

template <typename Index>
Index* index_data(Tensor& t) {
  return t.defined() ? static_cast<Index*>(t.raw_data()) : nullptr;
}

template <typename Index>
void max_pool_forward_as(const Tensor& x, MaxPoolResult& r, const Pool2dGeometry& g, bool relu) {
  const PoolDims d = dims_of(x.shape(), r.y.shape(), g, relu);
  detail::dispatch_floating(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x.raw_data());
    T* ys = static_cast<T*>(r.y.raw_data());
    Index* where = index_data<Index>(r.workspace);
    parallel_for(x.dim(0) * d.OH, 1, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row)
        max_pool_row(xs, ys, where, d, row / d.OH, row % d.OH);
    });
  });
}

template <typename Index>
void max_pool_backward_as(const Tensor& dy, const Tensor& workspace, Tensor& dx,
                          const Pool2dGeometry& g) {
  const PoolDims d = dims_of(dx.shape(), dy.shape(), g);
  const auto* where = static_cast<const Index*>(workspace.raw_data());
  detail::dispatch_floating(dy.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* dys = static_cast<const T*>(dy.raw_data());
    T* dxs = static_cast<T*>(dx.raw_data());
    if (!windows_tile(d)) return max_pool_scatter_backward(dys, where, dxs, d, dx.dim(0));
    const bool four = tile_backward_four_applies<T, Index>(d);
    parallel_for(dx.dim(0) * d.OH, 1, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        if constexpr (kVectorPool<T, Index>) {
          if (four) {
            tile_backward_four_avx512(dys, where, dxs, d, row / d.OH, row % d.OH);
            continue;
          }
        }
        max_pool_tile_backward(dys, where, dxs, d, row / d.OH, row % d.OH);
      }
    });
  });
}

}  // namespace

namespace detail {

template <typename T>
void max_pool_rows_as(const T* rows, int64_t W, int64_t C, const Pool2dGeometry& g, bool relu, T* y,
                      uint8_t* where) {
  const PoolDims d{
      .H = g.kernel_h, .W = W, .C = C, .OH = 1, .OW = W / g.kernel_w, .g = g, .relu = relu};
  max_pool_row(rows, y, where, d, 0, 0);
}

void max_pool_rows(const float* rows, int64_t W, int64_t C, const Pool2dGeometry& g, bool relu,
                   float* y, uint8_t* where) {
  max_pool_rows_as(rows, W, C, g, relu, y, where);
}

void max_pool_rows(const Bf16* rows, int64_t W, int64_t C, const Pool2dGeometry& g, bool relu,
                   Bf16* y, uint8_t* where) {
  max_pool_rows_as(rows, W, C, g, relu, y, where);
}

}  // namespace detail

Shape pool2d_output_shape(const Shape& x, const Pool2dGeometry& g) {
  if (x.rank() != 4) {
    TANDEM_THROW(ShapeError, "pooling: expected x (N, H, W, C), got ", x.to_string());
  }
  if (g.kernel_h < 1 || g.kernel_w < 1 || g.stride_h < 1 || g.stride_w < 1 || g.pad_h < 0 ||
      g.pad_w < 0 || g.pad_h >= g.kernel_h || g.pad_w >= g.kernel_w) {
    TANDEM_THROW(InvalidArgument,
                 "pooling: kernel and stride must be >= 1 and padding in "
                 "[0, kernel), got ",
                 geometry_key(g));
  }
  if (x[1] + 2 * g.pad_h < g.kernel_h || x[2] + 2 * g.pad_w < g.kernel_w) {
    TANDEM_THROW(ShapeError, "pooling: window ", g.kernel_h, "x", g.kernel_w,
                 " does not fit input ", x.to_string());
  }
  return Shape{x[0], (x[1] + 2 * g.pad_h - g.kernel_h) / g.stride_h + 1,
               (x[2] + 2 * g.pad_w - g.kernel_w) / g.stride_w + 1, x[3]};
}

MaxPoolResult max_pool2d_forward(const Tensor& x, const Pool2dGeometry& g, bool training,
                                 bool relu) {
  if (!is_floating(x.dtype())) {
    TANDEM_THROW(ShapeError, "max_pool2d: expected f32, bf16 or f16, got ", x.to_string());
  }
  if (relu && x.device().kind != DeviceKind::cpu) {
    TANDEM_THROW(InvalidArgument, "max_pool2d: the fused ReLU runs on the CPU; on ",
                 x.device().to_string(), " compose relu(max_pool2d(x))");
  }
  TANDEM_DISPATCH_CUDA(x, max_pool2d_forward(x, g, training));
  MaxPoolResult result;
  const Shape ys = pool2d_output_shape(x.shape(), g);
  result.y = Tensor::empty(ys, x.dtype(), x.device());
  if (training) {
    result.workspace =
        Tensor::empty(ys, workspace_dtype(g), x.device(), MemoryCategory::activations);
  }
  if (result.y.numel() == 0) return result;
  if (workspace_dtype(g) == DType::u8) {
    max_pool_forward_as<uint8_t>(x, result, g, relu);
  } else {
    max_pool_forward_as<int32_t>(x, result, g, relu);
  }
  return result;
}

Tensor max_pool2d_backward(const Tensor& dy, const Tensor& workspace, const Shape& x_shape,
                           const Pool2dGeometry& g) {
  const Shape y_shape = pool2d_output_shape(x_shape, g);
  if (dy.shape() != y_shape) {
    TANDEM_THROW(ShapeError, "max_pool2d_backward: dy ", dy.shape().to_string(), " should be ",
                 y_shape.to_string());
  }
  if (!is_floating(dy.dtype())) {
    TANDEM_THROW(ShapeError, "max_pool2d_backward: expected f32, bf16 or f16, got ",
                 dy.to_string());
  }
  detail::check_same_device("max_pool2d_backward", dy, {&workspace});
  TANDEM_DISPATCH_CUDA(dy, max_pool2d_backward(dy, workspace, x_shape, g));
  if (!workspace.defined() || workspace.dtype() != workspace_dtype(g) ||
      workspace.shape() != y_shape) {
    TANDEM_THROW(ShapeError, "max_pool2d_backward: the workspace of a training-mode forward (",
                 dtype_name(workspace_dtype(g)), " ", y_shape.to_string(), ") expected, got ",
                 workspace.to_string());
  }
  Tensor dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
  if (dx.numel() == 0) return dx;
  if (workspace.dtype() == DType::u8) {
    max_pool_backward_as<uint8_t>(dy, workspace, dx, g);
  } else {
    max_pool_backward_as<int32_t>(dy, workspace, dx, g);
  }
  return dx;
}

}  // namespace tandem::kernels
