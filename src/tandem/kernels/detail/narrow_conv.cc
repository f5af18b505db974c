#include "tandem/kernels/detail/narrow_conv.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tandem/base/parallel.h"
#include "tandem/base/target_clones.h"
#include "tandem/kernels/detail/float_io.h"
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

TANDEM_TARGET_CLONES void weights_block(const float* lines, const int64_t* offsets, const float* gy,
                                        float* acc_w, float* acc_b, const ConvDims& d) {
  weights_block_body(lines, offsets, gy, acc_w, acc_b, d);
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
  std::vector<float> shift(static_cast<size_t>(d.padded_o), 0.0f);
  if (bias.defined()) std::copy(bias.data<float>(), bias.data<float>() + d.O, shift.begin());
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
  const int64_t rows = x.dim(0) * d.OH;
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  const int64_t width = (d.padded_taps + 1) * d.padded_o;  // dw's taps, then db
  std::vector<double> partial(static_cast<size_t>(blocks * width), 0.0);
  const char* dys = static_cast<const char*>(dy.raw_data());
  const size_t row_bytes = static_cast<size_t>(d.OW * d.O) * dtype_size(dy.dtype());
  dispatch_f32_or_bf16(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x.raw_data());
    // An f32 dy row already in the blocks' layout is read in place.
    const bool in_place = dy.dtype() == DType::f32 && d.padded_o == d.O;
    parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
      std::vector<float> acc(static_cast<size_t>(width));
      std::vector<float> lines(static_cast<size_t>((d.KH + 1) * d.line_floats));
      std::vector<float> gy(in_place ? 0 : static_cast<size_t>(d.OW * d.padded_o), 0.0f);
      for (int64_t b = b0; b < b1; ++b) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        float* bias_sum = acc.data() + d.padded_taps * d.padded_o;
        for (int64_t r = b * kRowBlock; r < std::min(rows, (b + 1) * kRowBlock); ++r) {
          const char* dy_row = dys + static_cast<size_t>(r) * row_bytes;
          if (!in_place) load_pixels(dy_row, dy.dtype(), d.OW, d, gy.data());
          lines_of_row(xs, lines.data(), d, r / d.OH, r % d.OH);
          weights_block(lines.data(), offsets.data(),
                        in_place ? reinterpret_cast<const float*>(dy_row) : gy.data(), acc.data(),
                        bias_sum, d);
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

}  // namespace tandem::kernels::detail
