#include "tandem/kernels/detail/amx_weight_gradient.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/amx.h"
#include "tandem/kernels/detail/amx_tiles.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/kernels/flops.h"
#include "tandem/tensor/tensor.h"

namespace tandem::kernels::detail {
namespace {

// Rows of K per tile step: 16 pairs.
constexpr int64_t kStep = 32;
// Both operands' reformatted rows per chunk: about 1 MiB, so each block of
// output tiles reads them from L2.
constexpr int64_t kChunkBytes = 1 << 20;

struct Plan {
  int64_t M, K, N;
  int64_t chunk;  // rows of K per chunk, a multiple of kStep

  int64_t steps(int64_t rows) const { return (rows + kStep - 1) / kStep; }
  // uint16 per chunk: a as tiles (step, m block), b as tiles (step, n block).
  int64_t a_elements() const { return chunk * M; }
  int64_t b_elements() const { return chunk * N; }
};

// Row r of an operand with `width` columns, or null past the rows.
const uint16_t* row_or_null(const uint16_t* x, int64_t r, int64_t rows, int64_t width) {
  return r < rows ? x + r * width : nullptr;
}

// Steps s0..s1 of a chunk of `rows` rows from a's row `first`, and when
// step_sums is non-null each step's column sums of a (f32, M a step): a's tiles,
// for each step and block of 16 columns m, 16 rows m of 16 pairs (a[2j][m],
// a[2j + 1][m]); b's the same way for each block of 16 columns n, 16 rows j
// of 16 pairs (b[2j][n], b[2j + 1][n]). Rows past the chunk are zeros.
TANDEM_AMX void reformat(const Plan& P, const uint16_t* a, const uint16_t* b, int64_t first,
                         int64_t rows, int64_t s0, int64_t s1, uint16_t* a_tiles, uint16_t* b_tiles,
                         float* step_sums) {
  const int64_t blocks = P.M / 16;
  const uint16_t* a_chunk = a + first * P.M;
  const uint16_t* b_chunk = b + first * P.N;
  for (int64_t s = s0; s < s1; ++s) {
    for (int64_t mb = 0; mb < blocks; ++mb) {
      __m512i r[16];
      __m512 sum = _mm512_setzero_ps();
      for (int64_t j = 0; j < 16; ++j) {
        const int64_t row = s * kStep + 2 * j;
        const uint16_t* even = row_or_null(a_chunk, row, rows, P.M);
        const uint16_t* odd = row_or_null(a_chunk, row + 1, rows, P.M);
        const __m256i e = load_or_zero(even ? even + 16 * mb : nullptr),
                      o = load_or_zero(odd ? odd + 16 * mb : nullptr);
        r[j] = interleave(e, o);
        if (step_sums != nullptr) sum = _mm512_add_ps(sum, _mm512_add_ps(widen16(e), widen16(o)));
      }
      if (step_sums != nullptr) _mm512_storeu_ps(step_sums + s * P.M + 16 * mb, sum);
      transpose16(r);
      uint16_t* tile = a_tiles + (s * blocks + mb) * 512;
      for (int m = 0; m < 16; ++m) _mm512_storeu_si512(tile + 32 * m, r[m]);
    }
    // b's tiles are 16 pair rows of 16 columns each, as a's are: a tile's
    // rows in one KiB (rows N pairs apart would all fall in one L1 set).
    uint16_t* tiles = b_tiles + s * 16 * 2 * P.N;
    for (int64_t j = 0; j < 16; ++j) {
      const int64_t row = s * kStep + 2 * j;
      const uint16_t* even = row_or_null(b_chunk, row, rows, P.N);
      const uint16_t* odd = row_or_null(b_chunk, row + 1, rows, P.N);
      for (int64_t nb = 0; nb < P.N / 16; ++nb) {
        _mm512_storeu_si512(tiles + (nb * 16 + j) * 32,
                            interleave(load_or_zero(even ? even + 16 * nb : nullptr),
                                       load_or_zero(odd ? odd + 16 * nb : nullptr)));
      }
    }
  }
}

// One block of up to 2 x 2 output tiles (MB m blocks from mb, NB n blocks
// from nb) over a chunk's steps: tiles 0-3 accumulate, 4-5 hold a's tiles,
// 6-7 b's. The accumulators start at zero in the first chunk and otherwise
// from out.
template <int MB, int NB>
TANDEM_AMX void run_block(const Plan& P, const uint16_t* a_tiles, const uint16_t* b_tiles,
                          int64_t steps, int64_t mb, int64_t nb, bool first, float* out) {
  float* c = out + 16 * mb * P.N + 16 * nb;
  const int64_t c_stride = P.N * 4, c_down = 16 * P.N;
  if (first) {
    _tile_zero(0);
    if constexpr (NB > 1) _tile_zero(1);
    if constexpr (MB > 1) _tile_zero(2);
    if constexpr (MB > 1 && NB > 1) _tile_zero(3);
  } else {
    _tile_loadd(0, c, c_stride);
    if constexpr (NB > 1) _tile_loadd(1, c + 16, c_stride);
    if constexpr (MB > 1) _tile_loadd(2, c + c_down, c_stride);
    if constexpr (MB > 1 && NB > 1) _tile_loadd(3, c + c_down + 16, c_stride);
  }
  const int64_t blocks = P.M / 16;
  for (int64_t s = 0; s < steps; ++s) {
    const uint16_t* a_tile = a_tiles + (s * blocks + mb) * 512;
    const uint16_t* b_tile = b_tiles + s * 16 * 2 * P.N + nb * 512;
    _tile_loadd(4, a_tile, 64);
    _tile_loadd(6, b_tile, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NB > 1) {
      _tile_loadd(7, b_tile + 512, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (MB > 1) {
      _tile_loadd(5, a_tile + 512, 64);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (NB > 1) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, c_stride);
  if constexpr (NB > 1) _tile_stored(1, c + 16, c_stride);
  if constexpr (MB > 1) _tile_stored(2, c + c_down, c_stride);
  if constexpr (MB > 1 && NB > 1) _tile_stored(3, c + c_down + 16, c_stride);
}

void run(const Plan& P, const uint16_t* a_tiles, const uint16_t* b_tiles, int64_t steps, int64_t mb,
         int64_t nb, bool first, float* out) {
  const bool two_m = mb + 1 < P.M / 16, two_n = nb + 1 < P.N / 16;
  if (two_m && two_n) return run_block<2, 2>(P, a_tiles, b_tiles, steps, mb, nb, first, out);
  if (two_m) return run_block<2, 1>(P, a_tiles, b_tiles, steps, mb, nb, first, out);
  if (two_n) return run_block<1, 2>(P, a_tiles, b_tiles, steps, mb, nb, first, out);
  run_block<1, 1>(P, a_tiles, b_tiles, steps, mb, nb, first, out);
}

}  // namespace

bool amx_weight_gradient_applies(const Tensor& a, const Tensor& bias, const Tensor& out,
                                 const MatmulOptions& options, int64_t M, int64_t K, int64_t N) {
  return options.transpose_a && !options.transpose_b && a.dtype() == DType::bf16 &&
         out.dtype() == DType::f32 && !bias.defined() && options.activation == Activation::none &&
         M % 16 == 0 && N % 16 == 0 && M > 0 && N > 0 && K >= 256 && has_amx_bf16();
}

void amx_weight_gradient(const Tensor& a, const Tensor& b, Tensor& out, int64_t M, int64_t K,
                         int64_t N, Tensor* column_sums) {
  Plan P{M, K, N, 0};
  P.chunk = std::clamp<int64_t>(kChunkBytes / (2 * (M + N)) / kStep * kStep, kStep,
                                (K + kStep - 1) / kStep * kStep);
  MemoryCategoryScope workspace(MemoryCategory::workspace);
  Tensor a_chunk = Tensor::empty(Shape{P.a_elements()}, DType::bf16, a.device());
  Tensor b_chunk = Tensor::empty(Shape{P.b_elements()}, DType::bf16, a.device());
  auto* a_tiles = static_cast<uint16_t*>(a_chunk.raw_data());
  auto* b_tiles = static_cast<uint16_t*>(b_chunk.raw_data());
  const auto* as = static_cast<const uint16_t*>(a.raw_data());
  const auto* bs = static_cast<const uint16_t*>(b.raw_data());
  float* c = out.data<float>();
  // Column sums: each step's in f32 (32 rows), the steps' in double, in
  // order.
  std::vector<float> step_sums(column_sums != nullptr ? P.steps(P.chunk) * M : 0);
  std::vector<double> totals(column_sums != nullptr ? M : 0, 0.0);
  // Blocks of 2 x 2 output tiles, n fastest: a block's a tiles stay in L1
  // for the next.
  const int64_t m_blocks = (M / 16 + 1) / 2, n_blocks = (N / 16 + 1) / 2;
  count_flops(2 * M * N * K);
  for (int64_t first = 0; first < K; first += P.chunk) {
    const int64_t rows = std::min(P.chunk, K - first), steps = P.steps(rows);
    parallel_for(steps, 1, [&](int64_t s0, int64_t s1) {
      reformat(P, as, bs, first, rows, s0, s1, a_tiles, b_tiles,
               step_sums.empty() ? nullptr : step_sums.data());
    });
    for (int64_t s = 0; s < steps && !totals.empty(); ++s)
      for (int64_t m = 0; m < M; ++m) totals[m] += step_sums[s * M + m];
    parallel_for(m_blocks * n_blocks, 1, [&](int64_t i0, int64_t i1) {
      const TileScope tiles;
      for (int64_t i = i0; i < i1; ++i)
        run(P, a_tiles, b_tiles, steps, 2 * (i / n_blocks), 2 * (i % n_blocks), first == 0, c);
    });
  }
  if (column_sums != nullptr) {
    float* sums = column_sums->data<float>();
    for (int64_t m = 0; m < M; ++m) sums[m] = static_cast<float>(totals[m]);
  }
}

}  // namespace tandem::kernels::detail
