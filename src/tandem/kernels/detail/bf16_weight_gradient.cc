#include "tandem/kernels/detail/bf16_weight_gradient.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <optional>
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
  bool amx;       // the tiles' products; else AVX512-BF16's dot products

  int64_t steps(int64_t rows) const { return (rows + kStep - 1) / kStep; }
  // uint16 per chunk: a as tiles (step, m block), b as tiles (step, n block).
  int64_t a_elements() const { return chunk * M; }
  int64_t b_elements() const { return chunk * N; }
};

// Row r of an operand with `width` columns, or null past the rows.
const uint16_t* row_or_null(const uint16_t* x, int64_t r, int64_t rows, int64_t width) {
  return r < rows ? x + r * width : nullptr;
}

// Blocks of 16 columns of a (m) and of b (n), [m0, m1) and [n0, n1).
struct Columns {
  int64_t m0, m1, n0, n1;
};

// Steps s0..s1 of a chunk of `rows` rows from a's row `first`, for the
// column blocks `cols`, and when step_sums is non-null each step's column
// sums of a (f32, M a step): a's tiles, for each step and block of 16
// columns m, 16 rows m of 16 pairs (a[2j][m], a[2j + 1][m]) for the tiles,
// or untransposed, 16 rows j of 16 such pairs, for the dot products; b's
// for each block of 16 columns n, 16 rows j of 16 pairs (b[2j][n],
// b[2j + 1][n]). Rows past the chunk are zeros.
TANDEM_AMX void reformat(const Plan& P, const uint16_t* a, const uint16_t* b, int64_t first,
                         int64_t rows, int64_t s0, int64_t s1, const Columns& cols,
                         uint16_t* a_tiles, uint16_t* b_tiles, float* step_sums) {
  const int64_t blocks = P.M / 16;
  const uint16_t* a_chunk = a + first * P.M;
  const uint16_t* b_chunk = b + first * P.N;
  for (int64_t s = s0; s < s1; ++s) {
    for (int64_t mb = cols.m0; mb < cols.m1; ++mb) {
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
      if (P.amx) transpose16(r);
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
      for (int64_t nb = cols.n0; nb < cols.n1; ++nb) {
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

// The block of up to 2 x 2 tiles at (mb, nb), as many as `cols` holds.
void run(const Plan& P, const uint16_t* a_tiles, const uint16_t* b_tiles, int64_t steps,
         const Columns& cols, int64_t mb, int64_t nb, bool first, float* out) {
  const bool two_m = mb + 1 < cols.m1, two_n = nb + 1 < cols.n1;
  if (two_m && two_n) return run_block<2, 2>(P, a_tiles, b_tiles, steps, mb, nb, first, out);
  if (two_m) return run_block<2, 1>(P, a_tiles, b_tiles, steps, mb, nb, first, out);
  if (two_n) return run_block<1, 2>(P, a_tiles, b_tiles, steps, mb, nb, first, out);
  run_block<1, 1>(P, a_tiles, b_tiles, steps, mb, nb, first, out);
}

// The dot-product engine's block: 8 rows m (half `half` of a's tile mb) by
// NB blocks of 16 columns n from nb, over a chunk's steps. Each pair j of
// a column m is broadcast against row j of b's tile (16 columns n of one
// pair): the tile product's sums, one pair per instruction. 8 x 3
// accumulators leave registers for b's rows.
template <int NB>
TANDEM_AVX512_BF16 void dot_block(const Plan& P, const uint16_t* a_tiles, const uint16_t* b_tiles,
                                  int64_t steps, int64_t mb, int half, int64_t nb, bool first,
                                  float* out) {
  constexpr int R = 8;
  float* c = out + (16 * mb + R * half) * P.N + 16 * nb;
  __m512 acc[R][NB];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NB; ++j)
      acc[r][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * P.N + 16 * j);
  const int64_t blocks = P.M / 16;
  for (int64_t s = 0; s < steps; ++s) {
    const uint16_t* a_pairs = a_tiles + (s * blocks + mb) * 512 + R * half * 2;
    const uint16_t* b_rows = b_tiles + s * 16 * 2 * P.N + nb * 512;
    for (int k = 0; k < 16; ++k) {
      __m512bh b[NB];
      for (int j = 0; j < NB; ++j)
        b[j] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b_rows + j * 512 + 32 * k));
      for (int r = 0; r < R; ++r) dot_pair(acc[r], a_pairs + 32 * k + 2 * r, b);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NB; ++j) _mm512_storeu_ps(c + r * P.N + 16 * j, acc[r][j]);
}

// The output tiles in `cols` over one chunk by dot products: 8 rows m at a
// time against every column block, n fastest.
void dot_blocks(const Plan& P, const uint16_t* a_tiles, const uint16_t* b_tiles, int64_t steps,
                const Columns& cols, bool first, float* out) {
  for (int64_t mb = cols.m0; mb < cols.m1; ++mb)
    for (int half = 0; half < 2; ++half) {
      // Blocks 3 wide, the last two 2 wide where 3s would leave 1.
      int64_t nb = cols.n0;
      for (; cols.n1 - nb >= 5 || cols.n1 - nb == 3; nb += 3)
        dot_block<3>(P, a_tiles, b_tiles, steps, mb, half, nb, first, out);
      for (; nb + 2 <= cols.n1; nb += 2)
        dot_block<2>(P, a_tiles, b_tiles, steps, mb, half, nb, first, out);
      if (nb < cols.n1) dot_block<1>(P, a_tiles, b_tiles, steps, mb, half, nb, first, out);
    }
}

// The AMX tiles' configuration on this thread while the engine uses them.
struct EngineScope {
  std::optional<TileScope> tiles;
  explicit EngineScope(const Plan& P) {
    if (P.amx) tiles.emplace();
  }
};

struct Operands {
  const uint16_t* a;
  const uint16_t* b;
  uint16_t* chunks;  // each group's a and b tiles for one chunk
  float* out;
};

// The column sums of a chunk's steps (f32, M a step) added to totals in
// double, in step order, for a's column blocks [m0, m1).
void add_step_sums(const Plan& P, const std::vector<float>& step_sums, int64_t steps, int64_t m0,
                   int64_t m1, double* totals) {
  for (int64_t s = 0; s < steps; ++s)
    for (int64_t m = 16 * m0; m < 16 * m1; ++m) totals[m] += step_sums[s * P.M + m];
}

// The output blocks of 2 x 2 tiles in `cols` over one chunk, n fastest: a
// block's a tiles stay in L1 for the next.
void run_blocks(const Plan& P, const uint16_t* a_tiles, const uint16_t* b_tiles, int64_t steps,
                const Columns& cols, bool first, float* out) {
  if (!P.amx) return dot_blocks(P, a_tiles, b_tiles, steps, cols, first, out);
  for (int64_t mb = cols.m0; mb < cols.m1; mb += 2)
    for (int64_t nb = cols.n0; nb < cols.n1; nb += 2)
      run(P, a_tiles, b_tiles, steps, cols, mb, nb, first, out);
}

// Every thread of the team on each chunk in turn: the chunk's steps
// reformatted in parallel, then its blocks of output tiles in parallel.
// Each chunk costs two waits for the team, and a block reads the tiles
// other threads reformatted (another core's cache).
void by_chunks(const Plan& P, const Operands& o, double* totals) {
  uint16_t* a_tiles = o.chunks;
  uint16_t* b_tiles = o.chunks + P.a_elements();
  const Columns all{0, P.M / 16, 0, P.N / 16};
  std::vector<float> step_sums(totals != nullptr ? P.steps(P.chunk) * P.M : 0);
  // Blocks of 2 x 2 tiles for the tiles, of 2 tiles' rows by every column for
  // the dot products (their blocks are 3 columns wide).
  const int64_t m_step = 2, n_step = P.amx ? 2 : P.N / 16;
  const int64_t m_items = (P.M / 16 + m_step - 1) / m_step;
  const int64_t n_items = (P.N / 16 + n_step - 1) / n_step;
  for (int64_t first = 0; first < P.K; first += P.chunk) {
    const int64_t rows = std::min(P.chunk, P.K - first), steps = P.steps(rows);
    parallel_for(steps, 1, [&](int64_t s0, int64_t s1) {
      reformat(P, o.a, o.b, first, rows, s0, s1, all, a_tiles, b_tiles,
               step_sums.empty() ? nullptr : step_sums.data());
    });
    if (totals != nullptr) add_step_sums(P, step_sums, steps, 0, P.M / 16, totals);
    parallel_for(m_items * n_items, 1, [&](int64_t i0, int64_t i1) {
      const EngineScope engine(P);
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t mb = m_step * (i / n_items), nb = n_step * (i % n_items);
        const Columns block{mb, std::min(mb + m_step, P.M / 16), nb,
                            std::min(nb + n_step, P.N / 16)};
        run_blocks(P, a_tiles, b_tiles, steps, block, first == 0, o.out);
      }
    });
  }
}

// How many groups split the wider operand's columns between them (1: work
// by chunks instead), at most one per 32 columns. Each group reformats the
// narrower operand whole, so on the tiles groups pay off while that
// duplicate work stays under half the wider one's; the dot products, slower
// per column, gain from groups even where it does not (gpt's attention
// projection, 256 x 256, at 2 threads on Zen 4: 345 GFLOP/s in groups,
// oneDNN 303; by chunks the dot products trailed oneDNN by 7-10% on gpt's
// wider layers).
int column_groups(const Plan& P) {
  const int64_t wide = std::max(P.M, P.N), narrow = std::min(P.M, P.N);
  int groups = num_threads();
  while (groups > 1 && ((P.amx && 2 * (groups - 1) * narrow > wide) || 32 * groups > wide))
    --groups;
  return groups;
}

// Each group of columns of the wider operand on its own thread, over every
// chunk: its columns' tiles and the narrower operand's reformatted into its
// own buffers (in its core's cache), then its blocks of output tiles. The
// groups never wait for each other. Each output tile sums the same steps in
// the same order as by_chunks, so the bits do not depend on the split.
void by_column_groups(const Plan& P, const Operands& o, int groups, double* totals) {
  const bool split_m = P.M >= P.N;
  const int64_t blocks = (split_m ? P.M : P.N) / 16, pairs = (blocks + 1) / 2;
  parallel_for(groups, 1, [&](int64_t g0, int64_t g1) {
    const EngineScope engine(P);
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t lo = std::min(2 * (pairs * g / groups), blocks);
      const int64_t hi = std::min(2 * (pairs * (g + 1) / groups), blocks);
      const Columns cols = split_m ? Columns{lo, hi, 0, P.N / 16} : Columns{0, P.M / 16, lo, hi};
      uint16_t* a_tiles = o.chunks + g * (P.a_elements() + P.b_elements());
      uint16_t* b_tiles = a_tiles + P.a_elements();
      // a's column sums: by the group that owns the columns (group 0 when a is whole).
      const bool sums = totals != nullptr && (split_m || g == 0);
      std::vector<float> step_sums(sums ? P.steps(P.chunk) * P.M : 0);
      for (int64_t first = 0; first < P.K; first += P.chunk) {
        const int64_t rows = std::min(P.chunk, P.K - first), steps = P.steps(rows);
        reformat(P, o.a, o.b, first, rows, 0, steps, cols, a_tiles, b_tiles,
                 sums ? step_sums.data() : nullptr);
        if (sums) add_step_sums(P, step_sums, steps, cols.m0, cols.m1, totals);
        run_blocks(P, a_tiles, b_tiles, steps, cols, first == 0, o.out);
      }
    }
  });
}

}  // namespace

bool bf16_weight_gradient_applies(const Tensor& a, const Tensor& bias, const Tensor& out,
                                  const MatmulOptions& options, int64_t M, int64_t K, int64_t N) {
  // The dot products only where a's columns are at least b's: gpt's fc2
  // (M 256, N 1024) ran at 195 GFLOP/s there against oneDNN's 204 at 1
  // thread on Zen 4, its other layers at 190-192 against 183-189.
  const std::optional<Bf16Engine> engine = fastest_bf16_engine();
  return options.transpose_a && !options.transpose_b && a.dtype() == DType::bf16 &&
         out.dtype() == DType::f32 && !bias.defined() && options.activation == Activation::none &&
         M % 16 == 0 && N % 16 == 0 && M > 0 && N > 0 && K >= 256 && engine.has_value() &&
         (*engine == Bf16Engine::tiles || M >= N);
}

void bf16_weight_gradient(const Tensor& a, const Tensor& b, Tensor& out, int64_t M, int64_t K,
                          int64_t N, Tensor* column_sums, Bf16Engine engine) {
  Plan P{M, K, N, 0, engine == Bf16Engine::tiles};
  P.chunk = std::clamp<int64_t>(kChunkBytes / (2 * (M + N)) / kStep * kStep, kStep,
                                (K + kStep - 1) / kStep * kStep);
  count_flops(2 * M * N * K);
  const int groups = column_groups(P);
  MemoryCategoryScope workspace(MemoryCategory::workspace);
  Tensor chunks =
      Tensor::empty(Shape{groups * (P.a_elements() + P.b_elements())}, DType::bf16, a.device());
  const Operands operands{static_cast<const uint16_t*>(a.raw_data()),
                          static_cast<const uint16_t*>(b.raw_data()),
                          static_cast<uint16_t*>(chunks.raw_data()), out.data<float>()};
  std::vector<double> totals(column_sums != nullptr ? M : 0, 0.0);
  if (groups > 1) {
    by_column_groups(P, operands, groups, totals.empty() ? nullptr : totals.data());
  } else {
    by_chunks(P, operands, totals.empty() ? nullptr : totals.data());
  }
  if (column_sums != nullptr) {
    float* sums = column_sums->data<float>();
    for (int64_t m = 0; m < M; ++m) sums[m] = static_cast<float>(totals[m]);
  }
}

}  // namespace tandem::kernels::detail
