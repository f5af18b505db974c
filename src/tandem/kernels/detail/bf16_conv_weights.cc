#include "tandem/kernels/detail/bf16_conv_weights.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/amx.h"
#include "tandem/kernels/detail/amx_tiles.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/tensor/tensor.h"

namespace tandem::kernels::detail {
namespace {

// Accumulator tiles per pass over the data: tiles 0-3 accumulate, 4 holds
// dy's tile, 5-7 take turns holding x's (a load need not wait for the
// product still reading the previous one).
constexpr int kAccumulators = 4;
// The dot products' groups: 3 tiles' worth of columns, 8 rows o at a time
// (24 accumulators of 32 registers).
constexpr int kDotColumns = 3;
// Pairs of images reformatted at a time: about 1 MiB, so the passes over
// them (one per group of accumulators) read L2.
constexpr int64_t kChunkBytes = 1 << 20;

// The sizes in the padded planes (see the header). At stride 2 the padded
// input splits into phases, its rows and columns of each parity: tap
// (kh, kw) reads phase (kh % 2, kw % 2) at (oh + kh / 2, ow + kw / 2), so
// each tap is again one plane shifted by a constant. Only the phases some
// tap reads are built (a 1x1 kernel reads one).
struct Plan {
  int64_t N, H, W, C, O, KH, KW, pad_h, pad_w, stride_h, stride_w;
  int64_t row;   // positions per row of a phase's plane
  int64_t rows;  // rows of a phase's plane
  int64_t OH, OW;
  int64_t positions;  // OH * row output positions, ow >= OW ones zero
  int64_t tiles;      // of 16 positions
  int64_t plane;      // positions per phase, zero past the image
  int64_t pairs;      // of images, the last one alone when N is odd
  std::array<int64_t, 4> phase_slot{-1, -1, -1, -1};  // phase (a, b) at 2a + b: its plane
  int64_t phases = 0;
  bool amx;  // the tiles' products; else AVX512-BF16's dot products

  int64_t taps() const { return KH * KW; }
  int64_t phase_of(int64_t tap) const {
    return 2 * ((tap / KW) % stride_h) + (tap % KW) % stride_w;
  }
  // A tap's first position: its phase's plane, shifted.
  int64_t shift(int64_t tap) const {
    const int64_t kh = tap / KW, kw = tap % KW;
    return phase_slot[phase_of(tap)] * plane + (kh / stride_h) * row + kw / stride_w;
  }
  // uint16 per pair: x as (position, c, image); dy for the tiles as tiles of
  // (o, position, image), for the dot products as (oh, ow, o, image).
  int64_t x_elements() const { return phases * plane * C * 2; }
  int64_t dy_elements() const { return (amx ? tiles * 16 : OH * OW) * O * 2; }
};

Plan plan_of(const Shape& x, const Shape& w, const Conv2dGeometry& g, Bf16Engine engine) {
  Plan p{};
  p.N = x[0], p.H = x[1], p.W = x[2], p.C = x[3];
  p.KH = w[0], p.KW = w[1], p.O = w[3];
  p.pad_h = g.pad_h, p.pad_w = g.pad_w, p.stride_h = g.stride_h, p.stride_w = g.stride_w;
  p.OH = (p.H + 2 * p.pad_h - p.KH) / p.stride_h + 1;
  p.OW = (p.W + 2 * p.pad_w - p.KW) / p.stride_w + 1;
  p.row =
      std::max((p.W + 2 * p.pad_w + p.stride_w - 1) / p.stride_w, p.OW + (p.KW - 1) / p.stride_w);
  p.rows = (p.H + 2 * p.pad_h + p.stride_h - 1) / p.stride_h;
  p.positions = p.OH * p.row;
  p.tiles = (p.positions + 15) / 16;
  const int64_t reach = ((p.KH - 1) / p.stride_h) * p.row + (p.KW - 1) / p.stride_w;
  p.plane = std::max(p.rows * p.row, p.tiles * 16 + reach);
  p.pairs = (p.N + 1) / 2;
  p.amx = engine == Bf16Engine::tiles;
  for (int64_t tap = 0; tap < p.taps(); ++tap) {
    if (p.phase_slot[p.phase_of(tap)] < 0) p.phase_slot[p.phase_of(tap)] = p.phases++;
  }
  return p;
}

TANDEM_AMX void zero_positions(uint16_t* out, int64_t from, int64_t to) {
  for (int64_t i = from; i < to; i += 32) _mm512_storeu_si512(out + i, _mm512_setzero_si512());
}

// x of images x0 and x1 (null: a zero image) into the pair's phase planes:
// each position's C channels as (x0, x1) pairs, zero at padding positions.
TANDEM_AMX void interleave_inputs(const Plan& P, const uint16_t* x0, const uint16_t* x1,
                                  uint16_t* out) {
  const int64_t width = P.C * 2;  // uint16 per position
  for (int64_t phase = 0; phase < 4; ++phase) {
    if (P.phase_slot[phase] < 0) continue;
    uint16_t* plane = out + P.phase_slot[phase] * P.plane * width;
    for (int64_t i = 0; i < P.rows; ++i) {
      const int64_t h = P.stride_h * i + phase / 2 - P.pad_h;
      uint16_t* to = plane + i * P.row * width;
      if (h < 0 || h >= P.H) {
        zero_positions(to, 0, P.row * width);
        continue;
      }
      // Columns j inside the image: w = stride j + b - pad in [0, W).
      const int64_t b = phase % 2,
                    j0 = std::max<int64_t>(0, (P.pad_w - b + P.stride_w - 1) / P.stride_w);
      const int64_t j1 = std::min(P.row, (P.W + P.pad_w - b + P.stride_w - 1) / P.stride_w);
      zero_positions(to, 0, j0 * width);
      zero_positions(to, j1 * width, P.row * width);
      const int64_t first = (h * P.W + P.stride_w * j0 + b - P.pad_w) * P.C;
      if (P.stride_w == 1) {  // the row's columns are one run of x
        interleave_run(x0 + first, x1 ? x1 + first : nullptr, (j1 - j0) * P.C, to + j0 * width);
        continue;
      }
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t from = first + (j - j0) * P.stride_w * P.C;
        interleave_run(x0 + from, x1 ? x1 + from : nullptr, P.C, to + j * width);
      }
    }
    zero_positions(plane, P.rows * P.row * width, P.plane * width);
  }
}

// dy of images d0 and d1 (null: a zero image) as tiles: for each 16
// positions and 16 channels o, 16 rows o of 16 (d0, d1) pairs, zero at
// positions past a row (ow >= OW) or the plane. bias (O floats, or null)
// gains the pair's dy summed over positions.
TANDEM_AMX void transpose_gradients(const Plan& P, const uint16_t* d0, const uint16_t* d1,
                                    uint16_t* out, float* bias) {
  const int64_t blocks = P.O / 16;
  for (int64_t t = 0; t < P.tiles; ++t) {
    for (int64_t ob = 0; ob < blocks; ++ob) {
      __m512i rows[16];
      __m512 sum = _mm512_setzero_ps();
      int64_t oh = 16 * t / P.row, ow = 16 * t % P.row;
      for (int64_t j = 0; j < 16; ++j, ++ow) {
        if (ow == P.row) ow = 0, ++oh;
        if (oh >= P.OH || ow >= P.OW) {
          rows[j] = _mm512_setzero_si512();
          continue;
        }
        const int64_t at = (oh * P.OW + ow) * P.O + 16 * ob;
        const __m256i a = load_or_zero(d0 + at), b = load_or_zero(d1 ? d1 + at : nullptr);
        rows[j] = interleave(a, b);
        if (bias != nullptr) sum = _mm512_add_ps(sum, _mm512_add_ps(widen16(a), widen16(b)));
      }
      transpose16(rows);
      uint16_t* tile = out + (t * blocks + ob) * 512;
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(tile + 32 * i, rows[i]);
      if (bias != nullptr)
        _mm512_storeu_ps(bias + 16 * ob, _mm512_add_ps(_mm512_loadu_ps(bias + 16 * ob), sum));
    }
  }
}

// dy of images d0 and d1 (null: a zero image) for the dot products: each
// output position's O channels as (d0, d1) pairs. bias as in
// transpose_gradients.
TANDEM_AMX void interleave_gradients(const Plan& P, const uint16_t* d0, const uint16_t* d1,
                                     uint16_t* out, float* bias) {
  for (int64_t at = 0; at < P.OH * P.OW * P.O; at += 16) {
    const __m256i a = load_half(d0 + at), b = load_or_zero(d1 ? d1 + at : nullptr);
    _mm512_storeu_si512(out + 2 * at, interleave(a, b));
    if (bias != nullptr) {
      float* sum = bias + at % P.O;
      _mm512_storeu_ps(sum,
                       _mm512_add_ps(_mm512_loadu_ps(sum), _mm512_add_ps(widen16(a), widen16(b))));
    }
  }
}

// One pass over a chunk of pairs: up to kAccumulators (tap, c block) tiles
// for one block of o, each reading dy's tile and x's tile at its shift.
struct Group {
  int64_t ob = 0;
  int count = 0;
  std::array<int64_t, kAccumulators> x_offset{};  // uint16, from a tile's first position
  std::array<float*, kAccumulators> accumulator{};
};

#define TANDEM_AMX_PRODUCT(i, b)                      \
  if constexpr (N > i) {                              \
    _tile_loadd(b, x_tile + g.x_offset[i], x_stride); \
    _tile_dpbf16ps(i, 4, b);                          \
  }
#define TANDEM_AMX_ACCUMULATOR(op, i) \
  if constexpr (N > i) op(i, g.accumulator[i], 64)

template <int N>
TANDEM_AMX void run_group(const Plan& P, const Group& g, const uint16_t* xs, const uint16_t* dys,
                          int64_t pairs) {
  TANDEM_AMX_ACCUMULATOR(_tile_loadd, 0);
  TANDEM_AMX_ACCUMULATOR(_tile_loadd, 1);
  TANDEM_AMX_ACCUMULATOR(_tile_loadd, 2);
  TANDEM_AMX_ACCUMULATOR(_tile_loadd, 3);
  const int64_t x_stride = P.C * 4, blocks = P.O / 16;
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const uint16_t* x_pair = xs + pair * P.x_elements();
    const uint16_t* dy_tiles = dys + pair * P.dy_elements() + g.ob * 512;
    for (int64_t t = 0; t < P.tiles; ++t) {
      _tile_loadd(4, dy_tiles + t * blocks * 512, 64);
      const uint16_t* x_tile = x_pair + 16 * t * P.C * 2;
      TANDEM_AMX_PRODUCT(0, 5);
      TANDEM_AMX_PRODUCT(1, 6);
      TANDEM_AMX_PRODUCT(2, 7);
      TANDEM_AMX_PRODUCT(3, 5);
    }
  }
  TANDEM_AMX_ACCUMULATOR(_tile_stored, 0);
  TANDEM_AMX_ACCUMULATOR(_tile_stored, 1);
  TANDEM_AMX_ACCUMULATOR(_tile_stored, 2);
  TANDEM_AMX_ACCUMULATOR(_tile_stored, 3);
}

#undef TANDEM_AMX_PRODUCT
#undef TANDEM_AMX_ACCUMULATOR

// The dot-product engine's pass: rows o 8 * half .. + 8 of the group's
// NB accumulator tiles, each position's pair of dy broadcast against the
// position's row of x (16 channels c of the pair) at each tile's shift.
template <int NB>
TANDEM_AVX512_BF16 void dot_group(const Plan& P, const Group& g, int half, const uint16_t* xs,
                                  const uint16_t* dys, int64_t pairs) {
  constexpr int R = 8;
  __m512 acc[R][NB];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NB; ++j)
      acc[r][j] = _mm512_loadu_ps(g.accumulator[j] + (R * half + r) * 16);
  const int64_t x_step = P.C * 2, dy_step = P.O * 2;
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const uint16_t* x_pair = xs + pair * P.x_elements();
    const uint16_t* dy_pair = dys + pair * P.dy_elements() + (16 * g.ob + R * half) * 2;
    // Only the positions inside the output's rows: no padding to multiply.
    for (int64_t oh = 0; oh < P.OH; ++oh) {
      const uint16_t* x_row = x_pair + oh * P.row * x_step;
      const uint16_t* dy_row = dy_pair + oh * P.OW * dy_step;
      for (int64_t ow = 0; ow < P.OW; ++ow) {
        __m512bh b[NB];
        for (int j = 0; j < NB; ++j) {
          b[j] =
              reinterpret_cast<__m512bh>(_mm512_loadu_si512(x_row + g.x_offset[j] + ow * x_step));
        }
        for (int r = 0; r < R; ++r) dot_pair(acc[r], dy_row + ow * dy_step + 2 * r, b);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NB; ++j)
      _mm512_storeu_ps(g.accumulator[j] + (R * half + r) * 16, acc[r][j]);
}

void run_dots(const Plan& P, const Group& g, int half, const uint16_t* xs, const uint16_t* dys,
              int64_t pairs) {
  switch (g.count) {
    case 1:
      return dot_group<1>(P, g, half, xs, dys, pairs);
    case 2:
      return dot_group<2>(P, g, half, xs, dys, pairs);
    default:
      return dot_group<3>(P, g, half, xs, dys, pairs);
  }
}

void run(const Plan& P, const Group& g, const uint16_t* xs, const uint16_t* dys, int64_t pairs) {
  switch (g.count) {
    case 1:
      return run_group<1>(P, g, xs, dys, pairs);
    case 2:
      return run_group<2>(P, g, xs, dys, pairs);
    case 3:
      return run_group<3>(P, g, xs, dys, pairs);
    default:
      return run_group<4>(P, g, xs, dys, pairs);
  }
}

// Accumulator tiles in (ob, tap, cb) order, each 16 o rows of 16 c; for
// each block of o, its taps x c blocks split into groups of about equal size.
std::vector<Group> groups_of(const Plan& P, int size, float* accumulators) {
  const int64_t cblocks = P.C / 16, per_o = P.taps() * cblocks;
  const int64_t count = (per_o + size - 1) / size;
  std::vector<Group> groups;
  for (int64_t ob = 0; ob < P.O / 16; ++ob) {
    for (int64_t k = 0; k < count; ++k) {
      Group g;
      g.ob = ob;
      for (int64_t i = k * per_o / count; i < (k + 1) * per_o / count; ++i) {
        const int64_t tap = i / cblocks, cb = i % cblocks;
        g.x_offset[g.count] = (P.shift(tap) * P.C + 16 * cb) * 2;
        g.accumulator[g.count] = accumulators + (ob * per_o + i) * 256;
        ++g.count;
      }
      groups.push_back(g);
    }
  }
  return groups;
}

// The images a convolution's weight gradient reads, NHWC.
struct Images {
  const uint16_t* x;
  const uint16_t* dy;
};

// Images n and n + 1 (a zero image past the batch) as one pair: x into
// its phase planes, dy in the engine's layout, the pair's dy sums into
// bias when non-null.
void reformat_pair(const Plan& P, const Images& images, int64_t n, uint16_t* x_out,
                   uint16_t* dy_out, float* bias) {
  const int64_t x_image = P.H * P.W * P.C, dy_image = P.OH * P.OW * P.O;
  const bool alone = n + 1 >= P.N;
  interleave_inputs(P, images.x + n * x_image, alone ? nullptr : images.x + (n + 1) * x_image,
                    x_out);
  const uint16_t* d0 = images.dy + n * dy_image;
  const uint16_t* d1 = alone ? nullptr : images.dy + (n + 1) * dy_image;
  if (P.amx) {
    transpose_gradients(P, d0, d1, dy_out, bias);
  } else {
    interleave_gradients(P, d0, d1, dy_out, bias);
  }
}

// A weight gradient's inputs and the pairs' bias sums (P.O a pair, or
// none), which the reformatting fills.
struct Work {
  Images images;
  Device device;  // x's: its allocator holds the buffers
  int64_t chunk;  // pairs reformatted at a time
  std::vector<float> bias_sums;

  float* bias(const Plan& P, int64_t pair) {
    return bias_sums.empty() ? nullptr : bias_sums.data() + pair * P.O;
  }
};

// The tiles' way through the batch: every thread on each chunk in turn,
// its pairs reformatted in parallel, then its groups of accumulator tiles
// in parallel. Returns the accumulator tiles.
Tensor by_shared_chunks(const Plan& P, Work& work) {
  Tensor xs = Tensor::empty(Shape{work.chunk * P.x_elements()}, DType::bf16, work.device);
  Tensor dys = Tensor::empty(Shape{work.chunk * P.dy_elements()}, DType::bf16, work.device);
  Tensor accumulators = Tensor::zeros(Shape{P.taps() * P.C * P.O}, DType::f32, work.device);
  auto* x_pairs = static_cast<uint16_t*>(xs.raw_data());
  auto* dy_pairs = static_cast<uint16_t*>(dys.raw_data());
  const std::vector<Group> groups = groups_of(P, kAccumulators, accumulators.data<float>());
  for (int64_t first = 0; first < P.pairs; first += work.chunk) {
    const int64_t pairs = std::min(work.chunk, P.pairs - first);
    parallel_for(pairs, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        reformat_pair(P, work.images, 2 * (first + p), x_pairs + p * P.x_elements(),
                      dy_pairs + p * P.dy_elements(), work.bias(P, first + p));
      }
    });
    parallel_for(static_cast<int64_t>(groups.size()), 1, [&](int64_t g0, int64_t g1) {
      const TileScope tiles;
      for (int64_t g = g0; g < g1; ++g) run(P, groups[g], x_pairs, dy_pairs, pairs);
    });
  }
  return accumulators;
}

// The dot products' way through the batch: the pairs split into a number
// of slices that depends on the shapes only, each slice summed into its
// own accumulators by one thread from start to end (its chunks reformatted
// into that thread's buffers, read from its own core's cache, no waits),
// then the slices' sums added in order: the bits do not depend on the
// thread count. Sharing each chunk as the tiles do ran resnet's 16-channel
// layer 2.4x slower at 2 threads than at 1 (kernels_bench, Zen 4).
Tensor by_slices(const Plan& P, Work& work) {
  const int64_t set = P.taps() * P.C * P.O;  // floats per slice's accumulators
  const int64_t slices =
      std::clamp<int64_t>((int64_t{32} << 20) / (4 * set), 1, std::min<int64_t>(8, P.pairs));
  const int64_t workers = std::min<int64_t>(num_threads(), slices);
  const int64_t buffer = work.chunk * (P.x_elements() + P.dy_elements());
  Tensor buffers = Tensor::empty(Shape{workers * buffer}, DType::bf16, work.device);
  Tensor accumulators = Tensor::zeros(Shape{slices * set}, DType::f32, work.device);
  float* sums = accumulators.data<float>();
  parallel_for(workers, 1, [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; ++w) {
      uint16_t* x_pairs = static_cast<uint16_t*>(buffers.raw_data()) + w * buffer;
      uint16_t* dy_pairs = x_pairs + work.chunk * P.x_elements();
      for (int64_t s = w * slices / workers; s < (w + 1) * slices / workers; ++s) {
        const std::vector<Group> groups = groups_of(P, kDotColumns, sums + s * set);
        const int64_t end = (s + 1) * P.pairs / slices;
        for (int64_t first = s * P.pairs / slices; first < end; first += work.chunk) {
          const int64_t pairs = std::min(work.chunk, end - first);
          for (int64_t p = 0; p < pairs; ++p) {
            reformat_pair(P, work.images, 2 * (first + p), x_pairs + p * P.x_elements(),
                          dy_pairs + p * P.dy_elements(), work.bias(P, first + p));
          }
          for (const Group& g : groups)
            for (int half = 0; half < 2; ++half) run_dots(P, g, half, x_pairs, dy_pairs, pairs);
        }
      }
    }
  });
  for (int64_t s = 1; s < slices; ++s)
    for (int64_t i = 0; i < set; ++i) sums[i] += sums[s * set + i];
  return accumulators;
}

// The accumulator tiles (ob, tap, cb), 16 o rows of 16 c each, into dw (HWIO).
void write_weights(const Plan& P, const float* accumulators, float* w) {
  const int64_t cblocks = P.C / 16;
  for (int64_t ob = 0; ob < P.O / 16; ++ob)
    for (int64_t tap = 0; tap < P.taps(); ++tap)
      for (int64_t cb = 0; cb < cblocks; ++cb) {
        const float* tile = accumulators + ((ob * P.taps() + tap) * cblocks + cb) * 256;
        for (int64_t o = 0; o < 16; ++o)
          for (int64_t c = 0; c < 16; ++c)
            w[(tap * P.C + 16 * cb + c) * P.O + 16 * ob + o] = tile[o * 16 + c];
      }
}

}  // namespace

bool bf16_conv_weights_applies(const Tensor& x, const Tensor& dy, const Shape& w,
                               const Conv2dGeometry& g) {
  const auto stride = [](int64_t s) { return s == 1 || s == 2; };
  return x.dtype() == DType::bf16 && dy.dtype() == DType::bf16 && stride(g.stride_h) &&
         stride(g.stride_w) && g.dilation_h == 1 && g.dilation_w == 1 && w[2] % 16 == 0 &&
         w[3] % 16 == 0 && x.numel() > 0 && dy.numel() > 0 && fastest_bf16_engine().has_value();
}

void bf16_conv_backward_weights(const Tensor& x, const Tensor& dy, const Conv2dGeometry& geometry,
                                Tensor& dw, Tensor* db, Bf16Engine engine) {
  const Plan P = plan_of(x.shape(), dw.shape(), geometry, engine);
  const int64_t pair_bytes = (P.x_elements() + P.dy_elements()) * 2;
  Work work{Images{static_cast<const uint16_t*>(x.raw_data()),
                   static_cast<const uint16_t*>(dy.raw_data())},
            x.device(), std::clamp<int64_t>(kChunkBytes / pair_bytes, 1, P.pairs),
            std::vector<float>(db != nullptr ? static_cast<size_t>(P.pairs * P.O) : 0, 0.0f)};
  MemoryCategoryScope workspace(MemoryCategory::workspace);
  const Tensor accumulators = P.amx ? by_shared_chunks(P, work) : by_slices(P, work);
  write_weights(P, accumulators.data<float>(), dw.data<float>());
  if (db != nullptr) {
    float* b = db->data<float>();
    for (int64_t o = 0; o < P.O; ++o) {
      double total = 0.0;
      for (int64_t p = 0; p < P.pairs; ++p) total += work.bias_sums[p * P.O + o];
      b[o] = static_cast<float>(total);
    }
  }
}

}  // namespace tandem::kernels::detail
