#include "tandem/kernels/detail/narrow_conv.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "tandem/base/parallel.h"
#include "tandem/base/target_clones.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/kernels/detail/float_io.h"
#include "tandem/kernels/detail/max_pool_rows.h"
#include "tandem/tensor/convert.h"

namespace tandem::kernels::detail {
namespace {

// Each output row is a small matrix product: its patch (the inputs under
// each window, a row of taps per output pixel) times the weights (a row of
// output channels per tap). The patch is read in place from the input rows
// under the output row, converted to f32 once with the padding's zeros
// ("lines"). The micro-kernels hold a block of accumulators in registers:
// 4 pixels (or 4 taps) by 32 output channels, two AVX-512 vectors, so that
// each load feeds several FMAs.
constexpr int64_t kLanes = 16;
constexpr int64_t kGroup = 2 * kLanes;  // output channels per block
constexpr int64_t kBlock = 4;           // pixels (forward) or taps (weights) per block
// Output rows per partial sum of the weight gradient: summed in f32 within
// a block, in double across blocks.
constexpr int64_t kRowBlock = 8;

struct ConvDims {
  int64_t H, W, C, OH, OW, O, KH, KW;
  int64_t taps;         // KH KW C
  int64_t padded_taps;  // taps rounded up to kBlock
  int64_t padded_ow;    // OW rounded up to kBlock
  int64_t padded_o;     // O rounded up to kGroup
  int64_t line_floats;  // one line: every column a padded pixel block reads
  Conv2dGeometry g;
};

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

ConvDims dims_of(const Shape& x, const Shape& w, const Shape& y, const Conv2dGeometry& g) {
  ConvDims d{.H = x[1],
             .W = x[2],
             .C = x[3],
             .OH = y[1],
             .OW = y[2],
             .O = w[3],
             .KH = w[0],
             .KW = w[1],
             .g = g};
  d.taps = d.KH * d.KW * d.C;
  d.padded_taps = round_up(d.taps, kBlock);
  d.padded_ow = round_up(d.OW, kBlock);
  d.padded_o = round_up(d.O, kGroup);
  const int64_t columns =
      std::max(d.W + 2 * g.pad_w, (d.padded_ow - 1) * g.stride_w + (d.KW - 1) * g.dilation_w + 1);
  d.line_floats = columns * d.C;
  return d;
}

// A convolution whose output max pooling takes in windows that tile it
// (stride == kernel, no padding): PH x PW windows, the convolution's rows
// and columns past the last whole window left out.
struct PooledDims {
  ConvDims conv;
  Pool2dGeometry pool;
  int64_t PH, PW;
};

PooledDims pooled_dims_of(const Shape& x, const Shape& w, const Conv2dGeometry& g,
                          const Pool2dGeometry& pool) {
  const Shape y = conv2d_output_shape(x, w, g);
  return {dims_of(x, w, y, g), pool, y[1] / pool.kernel_h, y[2] / pool.kernel_w};
}

// kLanes floats as one value: GCC's vector extension, one AVX-512 register
// in the avx512f clone (left to itself, GCC unrolled such loops into scalar
// FMAs).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // nothing passes these between clones
using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));

[[gnu::always_inline]] inline Lanes load_lanes(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

[[gnu::always_inline]] inline void store_lanes(float* p, Lanes v) {
  std::memcpy(p, &v, sizeof v);
}

// The input rows under output row (n, oh) as f32 lines, one per kernel
// row, then one line of zeros: line kh holds input row oh stride_h - pad_h
// + kh dilation_h from column -pad_w on, zeros over the padding, for rows
// outside the image and past its right edge. Tap (kh, kw, c) of output
// pixel ow is at line kh, column ow stride_w + kw dilation_w, channel c.
template <typename T>
[[gnu::always_inline]] inline void lines_of_row_body(const T* __restrict x, float* __restrict lines,
                                                     const ConvDims& d, int64_t n, int64_t oh) {
  const Conv2dGeometry& g = d.g;
  std::fill(lines, lines + (d.KH + 1) * d.line_floats, 0.0f);
  for (int64_t kh = 0; kh < d.KH; ++kh) {
    const int64_t h = oh * g.stride_h - g.pad_h + kh * g.dilation_h;
    if (h < 0 || h >= d.H) continue;
    const T* row = x + (n * d.H + h) * d.W * d.C;
    float* line = lines + kh * d.line_floats + g.pad_w * d.C;
    for (int64_t i = 0; i < d.W * d.C; ++i) line[i] = to_f32(row[i]);
  }
}

// out (padded_ow x padded_o) = act(bias + patch x w), w being taps rows of
// padded_o; offsets[t] is where tap t of pixel 0 sits in the lines.
[[gnu::always_inline]] inline void forward_block_body(const float* __restrict lines,
                                                      const int64_t* __restrict offsets,
                                                      const float* __restrict w,
                                                      const float* __restrict bias, bool relu,
                                                      float* __restrict out, const ConvDims& d) {
  const int64_t step = d.g.stride_w * d.C;  // from one pixel's taps to the next's
  const Lanes zero{};
  for (int64_t ow0 = 0; ow0 < d.padded_ow; ow0 += kBlock) {
    const float* pixels = lines + ow0 * step;
    for (int64_t o0 = 0; o0 < d.padded_o; o0 += kGroup) {
      Lanes acc[kBlock][2];
      for (int64_t p = 0; p < kBlock; ++p) {
        acc[p][0] = load_lanes(bias + o0);
        acc[p][1] = load_lanes(bias + o0 + kLanes);
      }
      for (int64_t t = 0; t < d.taps; ++t) {
        const Lanes w0 = load_lanes(w + t * d.padded_o + o0);
        const Lanes w1 = load_lanes(w + t * d.padded_o + o0 + kLanes);
        const float* tap = pixels + offsets[t];
        for (int64_t p = 0; p < kBlock; ++p) {
          const float v = tap[p * step];
          acc[p][0] += v * w0;
          acc[p][1] += v * w1;
        }
      }
      for (int64_t p = 0; p < kBlock; ++p) {
        for (int64_t j = 0; j < 2; ++j) {
          const Lanes v = relu ? (acc[p][j] > zero ? acc[p][j] : zero) : acc[p][j];
          store_lanes(out + (ow0 + p) * d.padded_o + o0 + j * kLanes, v);
        }
      }
    }
  }
}

// acc_w (padded_taps x padded_o) += patch^T x gy and acc_b (padded_o) +=
// the sum of gy over the row's OW pixels, gy being the row's dy as f32 (OW
// x padded_o, zeros in the padding).
// Padding taps read the zero line.
[[gnu::always_inline]] inline void weights_block_body(const float* __restrict lines,
                                                      const int64_t* __restrict offsets,
                                                      const float* __restrict gy,
                                                      float* __restrict acc_w,
                                                      float* __restrict acc_b, const ConvDims& d) {
  const int64_t step = d.g.stride_w * d.C;
  for (int64_t o0 = 0; o0 < d.padded_o; o0 += kLanes) {
    Lanes sum = load_lanes(acc_b + o0);
    for (int64_t ow = 0; ow < d.OW; ++ow) sum += load_lanes(gy + ow * d.padded_o + o0);
    store_lanes(acc_b + o0, sum);
  }
  for (int64_t t0 = 0; t0 < d.padded_taps; t0 += kBlock) {
    for (int64_t o0 = 0; o0 < d.padded_o; o0 += kGroup) {
      Lanes acc[kBlock][2];
      for (int64_t q = 0; q < kBlock; ++q) {
        acc[q][0] = load_lanes(acc_w + (t0 + q) * d.padded_o + o0);
        acc[q][1] = load_lanes(acc_w + (t0 + q) * d.padded_o + o0 + kLanes);
      }
      for (int64_t ow = 0; ow < d.OW; ++ow) {
        const Lanes g0 = load_lanes(gy + ow * d.padded_o + o0);
        const Lanes g1 = load_lanes(gy + ow * d.padded_o + o0 + kLanes);
        for (int64_t q = 0; q < kBlock; ++q) {
          const float v = lines[offsets[t0 + q] + ow * step];
          acc[q][0] += v * g0;
          acc[q][1] += v * g1;
        }
      }
      for (int64_t q = 0; q < kBlock; ++q) {
        store_lanes(acc_w + (t0 + q) * d.padded_o + o0, acc[q][0]);
        store_lanes(acc_w + (t0 + q) * d.padded_o + o0 + kLanes, acc[q][1]);
      }
    }
  }
}
#pragma GCC diagnostic pop

TANDEM_TARGET_CLONES void lines_of_row(const float* x, float* lines, const ConvDims& d, int64_t n,
                                       int64_t oh) {
  lines_of_row_body(x, lines, d, n, oh);
}

TANDEM_TARGET_CLONES void lines_of_row(const Bf16* x, float* lines, const ConvDims& d, int64_t n,
                                       int64_t oh) {
  lines_of_row_body(x, lines, d, n, oh);
}

TANDEM_TARGET_CLONES void forward_block(const float* lines, const int64_t* offsets, const float* w,
                                        const float* bias, bool relu, float* out,
                                        const ConvDims& d) {
  forward_block_body(lines, offsets, w, bias, relu, out, d);
}

TANDEM_TARGET_CLONES void weights_block_portable(const float* lines, const int64_t* offsets,
                                                 const float* gy, float* acc_w, float* acc_b,
                                                 const ConvDims& d) {
  weights_block_body(lines, offsets, gy, acc_w, acc_b, d);
}

// weights_block_body on AVX-512 with its multiply-adds fused by the
// instruction: the compilers contract the portable loop's `acc += v * g`
// or not by their own rules (GCC at -O2 did, clang at -O1 did not), and
// the pooled weight gradient below must add its products as this does.
TANDEM_AVX512 void weights_block_avx512(const float* lines, const int64_t* offsets, const float* gy,
                                        float* acc_w, float* acc_b, const ConvDims& d) {
  const int64_t step = d.g.stride_w * d.C;
  for (int64_t o0 = 0; o0 < d.padded_o; o0 += kLanes) {
    __m512 sum = _mm512_loadu_ps(acc_b + o0);
    for (int64_t ow = 0; ow < d.OW; ++ow)
      sum = _mm512_add_ps(sum, _mm512_loadu_ps(gy + ow * d.padded_o + o0));
    _mm512_storeu_ps(acc_b + o0, sum);
  }
  for (int64_t t0 = 0; t0 < d.padded_taps; t0 += kBlock) {
    for (int64_t o0 = 0; o0 < d.padded_o; o0 += kGroup) {
      __m512 acc[kBlock][2];
      for (int64_t q = 0; q < kBlock; ++q)
        for (int64_t v = 0; v < 2; ++v)
          acc[q][v] = _mm512_loadu_ps(acc_w + (t0 + q) * d.padded_o + o0 + v * kLanes);
      for (int64_t ow = 0; ow < d.OW; ++ow) {
        const __m512 g[2] = {_mm512_loadu_ps(gy + ow * d.padded_o + o0),
                             _mm512_loadu_ps(gy + ow * d.padded_o + o0 + kLanes)};
        for (int64_t q = 0; q < kBlock; ++q) {
          const __m512 x = _mm512_set1_ps(lines[offsets[t0 + q] + ow * step]);
          for (int64_t v = 0; v < 2; ++v) acc[q][v] = _mm512_fmadd_ps(x, g[v], acc[q][v]);
        }
      }
      for (int64_t q = 0; q < kBlock; ++q)
        for (int64_t v = 0; v < 2; ++v)
          _mm512_storeu_ps(acc_w + (t0 + q) * d.padded_o + o0 + v * kLanes, acc[q][v]);
    }
  }
}

// acc_w (padded_taps x padded_o) += patch^T x gy and acc_b += gy's column
// sums for one row, as weights_block_body says.
void weights_block(const float* lines, const int64_t* offsets, const float* gy, float* acc_w,
                   float* acc_b, const ConvDims& d) {
  if (has_avx512()) return weights_block_avx512(lines, offsets, gy, acc_w, acc_b, d);
  weights_block_portable(lines, offsets, gy, acc_w, acc_b, d);
}

// Convolution row (n, h)'s gradient as f32 (OW x padded_o, zeros in the
// padding) from the pooled gradient: dy's value where `where` puts the
// window's maximum, 0 elsewhere and in rows and columns that no window
// covers; what max_pool2d_backward writes for that row, widened. dy is the
// bits of f32 or bf16 values (GCC vectorises the select on integers).
template <typename Bits>
[[gnu::always_inline]] inline void pooled_gradient_row_body(const Bits* __restrict dy,
                                                            const uint8_t* __restrict where,
                                                            const PooledDims& p, int64_t n,
                                                            int64_t h, float* __restrict gy) {
  const ConvDims& d = p.conv;
  std::fill(gy, gy + d.OW * d.padded_o, 0.0f);
  const int64_t ph = h / p.pool.kernel_h;
  if (ph >= p.PH) return;
  const int64_t first = (n * p.PH + ph) * p.PW * d.O;
  for (int64_t pw = 0; pw < p.PW; ++pw) {
    const Bits* from = dy + first + pw * d.O;
    const uint8_t* at = where + first + pw * d.O;
    for (int64_t j = 0; j < p.pool.kernel_w; ++j) {
      const auto pos = static_cast<uint8_t>(h % p.pool.kernel_h * p.pool.kernel_w + j);
      float* to = gy + (pw * p.pool.kernel_w + j) * d.padded_o;
      for (int64_t c = 0; c < d.O; ++c) {
        const auto bits = static_cast<uint32_t>(from[c]) << (32 - 8 * sizeof(Bits));
        to[c] = at[c] == pos ? std::bit_cast<float>(bits) : 0.0f;
      }
    }
  }
}

TANDEM_TARGET_CLONES void pooled_gradient_row(const uint32_t* dy, const uint8_t* where,
                                              const PooledDims& p, int64_t n, int64_t h,
                                              float* gy) {
  pooled_gradient_row_body(dy, where, p, n, h, gy);
}

TANDEM_TARGET_CLONES void pooled_gradient_row(const uint16_t* dy, const uint8_t* where,
                                              const PooledDims& p, int64_t n, int64_t h,
                                              float* gy) {
  pooled_gradient_row_body(dy, where, p, n, h, gy);
}

// Whether pooled_weights_row_avx512 takes these windows: two columns wide,
// output channels in whole vectors, some taps (it sums the bias gradient
// with the first block of them), an AVX-512 CPU.
bool pooled_weights_row_applies(const PooledDims& p) {
  return p.pool.kernel_w == 2 && p.conv.O % kLanes == 0 && p.conv.taps > 0 && has_avx512();
}

// Whether no value of the f32 or bf16 storage `values` has the exponent
// of an infinity or NaN. The products pooled_weights_row_avx512 leaves out
// have zero gradients, which turn such an x into a NaN in the composition.
template <typename Bits>
bool finite_values(const Bits* values, int64_t count, Bits exponent) {
  int64_t non_finite = 0;
  for (int64_t i = 0; i < count; ++i) non_finite += (values[i] & exponent) == exponent;
  return non_finite == 0;
}

bool finite_values(const Tensor& x) {
  if (x.dtype() == DType::bf16)
    return finite_values(static_cast<const uint16_t*>(x.raw_data()), x.numel(), uint16_t{0x7f80});
  return finite_values(static_cast<const uint32_t*>(x.raw_data()), x.numel(), 0x7f800000u);
}

// 16 lanes of a window of the pooled gradient (at dy + at, where + at):
// their gradient, the lanes whose maximum lies in the convolution row
// whose columns have positions left and right, and those at the right.
struct WindowLanes {
  __m512 g;
  __mmask16 here, at_right;
};

template <typename Bits>
TANDEM_AVX512 inline WindowLanes window_lanes(const Bits* dy, const uint8_t* where, int64_t at,
                                              __m512i left, __m512i right) {
  const __m512i position =
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(where + at)));
  const __mmask16 at_right = _mm512_cmpeq_epi32_mask(position, right);
  __m512 gradient;
  if constexpr (sizeof(Bits) == 4) {
    gradient = _mm512_castsi512_ps(_mm512_loadu_si512(dy + at));
  } else {
    gradient = load16(dy + at);
  }
  return {gradient, static_cast<__mmask16>(_mm512_cmpeq_epi32_mask(position, left) | at_right),
          at_right};
}

// weights_block for convolution row i of the window row whose pooled
// gradient is dy (PW x O, f32 or bf16 bits) and positions `where`, without
// building that row's gradient: of each window's two columns, a lane takes
// the one its maximum came from (a blend, where weights_block spends a
// product on each column), and only lanes whose maximum lies in this row
// gain the product. The bits of weights_block over the expanded row for
// finite x: the products left out are zero and would add nothing, those
// kept come in the same order (column by column), fused multiply-adds as
// weights_block_avx512's. NB taps at a time, their accumulators in
// registers: 9 where the taps come in nines (3x3 kernels), so that no tap
// is padding and each window's lanes are worked out once per row; else 4,
// over the padded taps. Output channels V vectors at a time (2 where they
// come in 32s). The first block also sums the bias gradient.
template <int NB, int V, typename Bits>
TANDEM_AVX512 void pooled_weights_row_avx512(const float* lines, const int64_t* offsets,
                                             const Bits* dy, const uint8_t* where, int64_t i,
                                             float* acc_w, float* acc_b, const PooledDims& p) {
  const ConvDims& d = p.conv;
  const int64_t step = d.g.stride_w * d.C;
  const __m512i left = _mm512_set1_epi32(static_cast<int>(2 * i));
  const __m512i right = _mm512_set1_epi32(static_cast<int>(2 * i + 1));
  const int64_t taps = NB == kBlock ? d.padded_taps : d.taps;
  for (int64_t o0 = 0; o0 < d.O; o0 += V * kLanes) {
    __m512 sum[V];
    for (int64_t v = 0; v < V; ++v) sum[v] = _mm512_loadu_ps(acc_b + o0 + v * kLanes);
    for (int64_t t0 = 0; t0 < taps; t0 += NB) {
      __m512 acc[NB][V];
      for (int64_t q = 0; q < NB; ++q)
        for (int64_t v = 0; v < V; ++v)
          acc[q][v] = _mm512_loadu_ps(acc_w + (t0 + q) * d.padded_o + o0 + v * kLanes);
      for (int64_t pw = 0; pw < p.PW; ++pw) {
        WindowLanes l[V];
        for (int64_t v = 0; v < V; ++v)
          l[v] = window_lanes(dy, where, pw * d.O + o0 + v * kLanes, left, right);
        if (t0 == 0) {
          for (int64_t v = 0; v < V; ++v)
            sum[v] = _mm512_mask_add_ps(sum[v], l[v].here, sum[v], l[v].g);
        }
        for (int64_t q = 0; q < NB; ++q) {
          const float* tap = lines + offsets[t0 + q] + 2 * pw * step;
          const __m512 x_left = _mm512_set1_ps(tap[0]), x_right = _mm512_set1_ps(tap[step]);
          for (int64_t v = 0; v < V; ++v) {
            const __m512 x = _mm512_mask_blend_ps(l[v].at_right, x_left, x_right);
            acc[q][v] = _mm512_mask3_fmadd_ps(x, l[v].g, acc[q][v], l[v].here);
          }
        }
      }
      for (int64_t q = 0; q < NB; ++q)
        for (int64_t v = 0; v < V; ++v)
          _mm512_storeu_ps(acc_w + (t0 + q) * d.padded_o + o0 + v * kLanes, acc[q][v]);
    }
    for (int64_t v = 0; v < V; ++v) _mm512_storeu_ps(acc_b + o0 + v * kLanes, sum[v]);
  }
}

template <typename Bits>
void pooled_weights_row(const float* lines, const int64_t* offsets, const Bits* dy,
                        const uint8_t* where, int64_t i, float* acc_w, float* acc_b,
                        const PooledDims& p) {
  const bool nines = p.conv.taps % 9 == 0, pairs = p.conv.O % kGroup == 0;
  if (nines && pairs)
    return pooled_weights_row_avx512<9, 2>(lines, offsets, dy, where, i, acc_w, acc_b, p);
  if (nines) return pooled_weights_row_avx512<9, 1>(lines, offsets, dy, where, i, acc_w, acc_b, p);
  if (pairs)
    return pooled_weights_row_avx512<kBlock, 2>(lines, offsets, dy, where, i, acc_w, acc_b, p);
  pooled_weights_row_avx512<kBlock, 1>(lines, offsets, dy, where, i, acc_w, acc_b, p);
}

// Where tap t = (kh KW + kw) C + c of pixel 0 sits in the lines; padding
// taps (up to padded_taps) at the zero line.
std::vector<int64_t> tap_offsets(const ConvDims& d) {
  std::vector<int64_t> offsets;
  for (int64_t kh = 0; kh < d.KH; ++kh)
    for (int64_t kw = 0; kw < d.KW; ++kw)
      for (int64_t c = 0; c < d.C; ++c)
        offsets.push_back(kh * d.line_floats + kw * d.g.dilation_w * d.C + c);
  offsets.resize(static_cast<size_t>(d.padded_taps), d.KH * d.line_floats);
  return offsets;
}

// The weights as f32, taps rows of padded_o with zeros past O.
std::vector<float> padded_weights(const Tensor& w, const ConvDims& d) {
  const Tensor wf = w.to(DType::f32);
  const float* src = wf.data<float>();
  std::vector<float> out(static_cast<size_t>(d.taps * d.padded_o), 0.0f);
  for (int64_t t = 0; t < d.taps; ++t)
    std::copy(src + t * d.O, src + (t + 1) * d.O, out.begin() + t * d.padded_o);
  return out;
}

// count pixels of O values in `dtype` <-> f32 rows of padded_o.
void load_pixels(const char* from, DType dtype, int64_t count, const ConvDims& d, float* to) {
  if (d.padded_o == d.O) return convert_on_this_thread(from, dtype, to, DType::f32, count * d.O);
  const size_t bytes = static_cast<size_t>(d.O) * dtype_size(dtype);
  for (int64_t p = 0; p < count; ++p)
    convert_on_this_thread(from + p * bytes, dtype, to + p * d.padded_o, DType::f32, d.O);
}

void store_pixels(const float* from, int64_t count, const ConvDims& d, char* to, DType dtype) {
  if (d.padded_o == d.O) return convert_on_this_thread(from, DType::f32, to, dtype, count * d.O);
  const size_t bytes = static_cast<size_t>(d.O) * dtype_size(dtype);
  for (int64_t p = 0; p < count; ++p)
    convert_on_this_thread(from + p * d.padded_o, DType::f32, to + p * bytes, dtype, d.O);
}

// The bias over padded_o lanes, zeros without one.
std::vector<float> bias_lanes(const Tensor& bias, const ConvDims& d) {
  std::vector<float> shift(static_cast<size_t>(d.padded_o), 0.0f);
  if (bias.defined()) std::copy(bias.data<float>(), bias.data<float>() + d.O, shift.begin());
  return shift;
}

// dw and db from x and the convolution's output gradient, which
// accumulate_row(r, lines, acc_w, acc_b, scratch) adds for row r into
// acc_w (padded_taps x padded_o) and acc_b (padded_o) from the row's input
// lines (scratch: OW x padded_o floats of its own): summed in f32 over
// blocks of kRowBlock rows, in double across blocks.
template <typename AccumulateRow>
void sum_weight_gradients(const Tensor& x, const ConvDims& d, AccumulateRow&& accumulate_row,
                          Tensor& dw, Tensor* db) {
  const int64_t rows = x.dim(0) * d.OH;
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  const int64_t width = (d.padded_taps + 1) * d.padded_o;  // dw's taps, then db
  std::vector<double> partial(static_cast<size_t>(blocks * width), 0.0);
  dispatch_f32_or_bf16(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x.raw_data());
    parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
      std::vector<float> acc(static_cast<size_t>(width));
      std::vector<float> lines(static_cast<size_t>((d.KH + 1) * d.line_floats));
      std::vector<float> scratch(static_cast<size_t>(d.OW * d.padded_o), 0.0f);
      for (int64_t b = b0; b < b1; ++b) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        float* bias_sum = acc.data() + d.padded_taps * d.padded_o;
        for (int64_t r = b * kRowBlock; r < std::min(rows, (b + 1) * kRowBlock); ++r) {
          lines_of_row(xs, lines.data(), d, r / d.OH, r % d.OH);
          accumulate_row(r, lines.data(), acc.data(), bias_sum, scratch.data());
        }
        double* sums = partial.data() + b * width;
        for (int64_t i = 0; i < width; ++i) sums[i] = static_cast<double>(acc[i]);
      }
    });
  });
  std::vector<double> total(static_cast<size_t>(width), 0.0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t i = 0; i < width; ++i) total[i] += partial[b * width + i];
  float* dws = dw.data<float>();
  for (int64_t t = 0; t < d.taps; ++t)
    for (int64_t o = 0; o < d.O; ++o)
      dws[t * d.O + o] = static_cast<float>(total[t * d.padded_o + o]);
  if (db != nullptr) {
    float* dbs = db->data<float>();
    for (int64_t o = 0; o < d.O; ++o)
      dbs[o] = static_cast<float>(total[d.padded_taps * d.padded_o + o]);
  }
}

}  // namespace

bool narrow_conv_applies(const Shape& x, Activation activation) {
  return x.rank() == 4 && x[3] <= kNarrowChannels &&
         (activation == Activation::none || activation == Activation::relu);
}

void narrow_conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                         const Conv2dGeometry& g, Activation activation, Tensor& y) {
  const ConvDims d = dims_of(x.shape(), w.shape(), y.shape(), g);
  const std::vector<float> weights = padded_weights(w, d);
  const std::vector<int64_t> offsets = tap_offsets(d);
  const std::vector<float> shift = bias_lanes(bias, d);
  const bool relu = activation == Activation::relu;
  char* ys = static_cast<char*>(y.raw_data());
  const size_t row_bytes = static_cast<size_t>(d.OW * d.O) * dtype_size(y.dtype());
  dispatch_f32_or_bf16(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x.raw_data());
    // An f32 output row already in the blocks' layout is written in place
    // (the copy was 5% of the cnn's f32 step).
    const bool in_place = y.dtype() == DType::f32 && d.padded_o == d.O && d.padded_ow == d.OW;
    parallel_for(x.dim(0) * d.OH, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> lines(static_cast<size_t>((d.KH + 1) * d.line_floats));
      std::vector<float> row(in_place ? 0 : static_cast<size_t>(d.padded_ow * d.padded_o));
      for (int64_t r = begin; r < end; ++r) {
        char* out = ys + static_cast<size_t>(r) * row_bytes;
        lines_of_row(xs, lines.data(), d, r / d.OH, r % d.OH);
        forward_block(lines.data(), offsets.data(), weights.data(), shift.data(), relu,
                      in_place ? reinterpret_cast<float*>(out) : row.data(), d);
        if (!in_place) store_pixels(row.data(), d.OW, d, out, y.dtype());
      }
    });
  });
}

void narrow_conv_backward_weights(const Tensor& x, const Tensor& dy, const Conv2dGeometry& g,
                                  Tensor& dw, Tensor* db) {
  const ConvDims d = dims_of(x.shape(), dw.shape(), dy.shape(), g);
  const std::vector<int64_t> offsets = tap_offsets(d);
  const char* dys = static_cast<const char*>(dy.raw_data());
  const size_t row_bytes = static_cast<size_t>(d.OW * d.O) * dtype_size(dy.dtype());
  // An f32 dy row already in the blocks' layout is read in place.
  const bool in_place = dy.dtype() == DType::f32 && d.padded_o == d.O;
  sum_weight_gradients(
      x, d,
      [&](int64_t r, const float* lines, float* acc_w, float* acc_b, float* scratch) {
        const char* dy_row = dys + static_cast<size_t>(r) * row_bytes;
        const float* gy = reinterpret_cast<const float*>(dy_row);
        if (!in_place) {
          load_pixels(dy_row, dy.dtype(), d.OW, d, scratch);
          gy = scratch;
        }
        weights_block(lines, offsets.data(), gy, acc_w, acc_b, d);
      },
      dw, db);
}

void narrow_conv_pool_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                              const Conv2dGeometry& g, const Pool2dGeometry& pool, Tensor& y,
                              Tensor* where) {
  const PooledDims p = pooled_dims_of(x.shape(), w.shape(), g, pool);
  const ConvDims& d = p.conv;
  const std::vector<float> weights = padded_weights(w, d);
  const std::vector<int64_t> offsets = tap_offsets(d);
  const std::vector<float> shift = bias_lanes(bias, d);
  uint8_t* wheres = where != nullptr ? where->data<uint8_t>() : nullptr;
  const int64_t pooled_row = p.PW * d.O;
  dispatch_f32_or_bf16(x.dtype(), [&](auto x_tag) {
    using T = decltype(x_tag);
    const T* xs = static_cast<const T*>(x.raw_data());
    dispatch_f32_or_bf16(y.dtype(), [&](auto y_tag) {
      using Y = decltype(y_tag);
      Y* ys = static_cast<Y*>(y.raw_data());
      parallel_for(x.dim(0) * p.PH, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> lines(static_cast<size_t>((d.KH + 1) * d.line_floats));
        std::vector<float> row(static_cast<size_t>(d.padded_ow * d.padded_o));
        // A window row's convolution rows in y's dtype, pooled from cache.
        std::vector<Y> window_rows(static_cast<size_t>(pool.kernel_h * d.OW * d.O));
        for (int64_t r = begin; r < end; ++r) {
          for (int64_t i = 0; i < pool.kernel_h; ++i) {
            lines_of_row(xs, lines.data(), d, r / p.PH, r % p.PH * pool.kernel_h + i);
            forward_block(lines.data(), offsets.data(), weights.data(), shift.data(), false,
                          row.data(), d);
            store_pixels(row.data(), d.OW, d,
                         reinterpret_cast<char*>(window_rows.data() + i * d.OW * d.O), y.dtype());
          }
          max_pool_rows(window_rows.data(), d.OW, d.O, pool, true, ys + r * pooled_row,
                        wheres != nullptr ? wheres + r * pooled_row : nullptr);
        }
      });
    });
  });
}

void narrow_conv_pool_backward_weights(const Tensor& x, const Tensor& dy, const Tensor& where,
                                       const Conv2dGeometry& g, const Pool2dGeometry& pool,
                                       Tensor& dw, Tensor* db) {
  const PooledDims p = pooled_dims_of(x.shape(), dw.shape(), g, pool);
  const ConvDims& d = p.conv;
  const std::vector<int64_t> offsets = tap_offsets(d);
  // Non-finite x: every product taken, so the composition's NaNs come out.
  const bool sparse = pooled_weights_row_applies(p) && finite_values(x);
  const auto accumulate = [&](const auto* dys) {
    const uint8_t* at = where.data<uint8_t>();
    sum_weight_gradients(
        x, d,
        [&](int64_t r, const float* lines, float* acc_w, float* acc_b, float* scratch) {
          const int64_t n = r / d.OH, h = r % d.OH, ph = h / pool.kernel_h;
          if (sparse) {
            // Rows below the last whole window have no gradient.
            if (ph >= p.PH) return;
            const int64_t first = (n * p.PH + ph) * p.PW * d.O;
            pooled_weights_row(lines, offsets.data(), dys + first, at + first, h % pool.kernel_h,
                               acc_w, acc_b, p);
            return;
          }
          pooled_gradient_row(dys, at, p, n, h, scratch);
          weights_block(lines, offsets.data(), scratch, acc_w, acc_b, d);
        },
        dw, db);
  };
  if (dy.dtype() == DType::bf16) {
    accumulate(static_cast<const uint16_t*>(dy.raw_data()));
  } else {
    accumulate(static_cast<const uint32_t*>(dy.raw_data()));
  }
}

}  // namespace tandem::kernels::detail
