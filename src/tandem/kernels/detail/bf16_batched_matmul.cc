#include "tandem/kernels/detail/bf16_batched_matmul.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/amx_tiles.h"
#include "tandem/kernels/flops.h"
#include "tandem/tensor/convert.h"

namespace tandem::kernels::detail {
namespace {

constexpr int64_t kMaxSide = 256;

// at (M rows of K) from a (K rows of M): pairs of a's rows as 32-bit units
// (a[2p][m], a[2p + 1][m]), transposed 16 x 16 at a time.
TANDEM_AMX void transpose_rows(const uint16_t* a, int64_t K, int64_t M, uint16_t* at) {
  for (int64_t p0 = 0; p0 < K / 2; p0 += 16) {
    for (int64_t m0 = 0; m0 < M; m0 += 16) {
      __m512i r[16];
      for (int j = 0; j < 16; ++j) {
        const uint16_t* row = a + 2 * (p0 + j) * M + m0;
        r[j] = interleave(load_half(row), load_half(row + M));
      }
      transpose16(r);
      for (int m = 0; m < 16; ++m) _mm512_storeu_si512(at + (m0 + m) * K + 2 * p0, r[m]);
    }
  }
}

// The pair layout of b (K/2 rows of N units (b(2p, n), b(2p + 1, n))) from
// b stored (K, N), or (N, K) when transposed: then each unit is already
// adjacent in b's row n, and the units are transposed 16 x 16 at a time.
TANDEM_AMX void pair_rows(const uint16_t* b, int64_t K, int64_t N, bool transposed,
                          uint16_t* pairs) {
  if (!transposed) {
    for (int64_t p = 0; p < K / 2; ++p)
      for (int64_t n = 0; n < N; n += 16) {
        const uint16_t* row = b + 2 * p * N + n;
        _mm512_storeu_si512(pairs + (p * N + n) * 2,
                            interleave(load_half(row), load_half(row + N)));
      }
    return;
  }
  for (int64_t n0 = 0; n0 < N; n0 += 16) {
    for (int64_t p0 = 0; p0 < K / 2; p0 += 16) {
      __m512i r[16];
      for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_si512(b + (n0 + j) * K + 2 * p0);
      transpose16(r);
      for (int p = 0; p < 16; ++p) _mm512_storeu_si512(pairs + ((p0 + p) * N + n0) * 2, r[p]);
    }
  }
}

#define TANDEM_AMX_PRODUCT(i, b)                                   \
  if constexpr (G > i) {                                           \
    _tile_loadd(b, pairs + (16 * s * N + n0 + 16 * i) * 2, N * 4); \
    _tile_dpbf16ps(i, 4, b);                                       \
  }
#define TANDEM_AMX_STORE(i) \
  if constexpr (G > i) _tile_stored(i, c + n0 + 16 * i, ldc * 4)

// Rows per tile, and the steps of the sums over k (a tile of bf16 pairs)
// and of the columns.
constexpr int64_t kTileRows = 16, kTileK = 32, kTileColumns = 16;

// 16 rows of c (f32, row stride ldc), columns n0 .. n0 + 16 G: the rows of
// a (row stride lda) times the pair-layout b (N columns), summed over k in
// [32 s_begin, 32 s_end).
template <int G>
TANDEM_AMX void product_rows(const uint16_t* a, int64_t lda, const uint16_t* pairs, int64_t s_begin,
                             int64_t s_end, int64_t N, int64_t n0, float* c, int64_t ldc) {
  if constexpr (G > 0) _tile_zero(0);
  if constexpr (G > 1) _tile_zero(1);
  if constexpr (G > 2) _tile_zero(2);
  if constexpr (G > 3) _tile_zero(3);
  for (int64_t s = s_begin; s < s_end; ++s) {
    _tile_loadd(4, a + 32 * s, lda * 2);
    TANDEM_AMX_PRODUCT(0, 5);
    TANDEM_AMX_PRODUCT(1, 6);
    TANDEM_AMX_PRODUCT(2, 7);
    TANDEM_AMX_PRODUCT(3, 5);
  }
  TANDEM_AMX_STORE(0);
  TANDEM_AMX_STORE(1);
  TANDEM_AMX_STORE(2);
  TANDEM_AMX_STORE(3);
}

#undef TANDEM_AMX_PRODUCT
#undef TANDEM_AMX_STORE

void product_tiles(const uint16_t* a, int64_t lda, const uint16_t* pairs, const CausalTiles& range,
                   int64_t N, float* c, int64_t ldc) {
  const int64_t s_begin = range.k_begin / 32, s_end = range.k_end / 32;
  for (int64_t n0 = 0; n0 < range.n_end; n0 += 64) {
    switch ((std::min<int64_t>(range.n_end - n0, 64)) / 16) {
      case 1:
        product_rows<1>(a, lda, pairs, s_begin, s_end, N, n0, c, ldc);
        break;
      case 2:
        product_rows<2>(a, lda, pairs, s_begin, s_end, N, n0, c, ldc);
        break;
      case 3:
        product_rows<3>(a, lda, pairs, s_begin, s_end, N, n0, c, ldc);
        break;
      default:
        product_rows<4>(a, lda, pairs, s_begin, s_end, N, n0, c, ldc);
        break;
    }
  }
}

// The dot products' blocks: 8 rows, a pair of k per instruction, 16
// columns per accumulator (the causal skips are finer than the tiles').
constexpr int64_t kDotRows = 8, kDotK = 2;

// 8 rows of c, columns n0 .. n0 + 16 NB: each pair (a(m, 2p), a(m, 2p +
// 1)), adjacent in a's row, broadcast against pair row p of b, over p in
// [p_begin, p_end). 8 x 3 accumulators leave registers for b's rows.
template <int NB>
TANDEM_AVX512_BF16 void dot_rows(const uint16_t* a, int64_t lda, const uint16_t* pairs,
                                 int64_t p_begin, int64_t p_end, int64_t N, int64_t n0, float* c,
                                 int64_t ldc) {
  __m512 acc[kDotRows][NB];
  for (auto& row : acc)
    for (__m512& v : row) v = _mm512_setzero_ps();
  for (int64_t p = p_begin; p < p_end; ++p) {
    __m512bh b[NB];
    for (int j = 0; j < NB; ++j)
      b[j] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(pairs + (p * N + n0 + 16 * j) * 2));
    for (int r = 0; r < kDotRows; ++r) dot_pair(acc[r], a + r * lda + 2 * p, b);
  }
  for (int r = 0; r < kDotRows; ++r)
    for (int j = 0; j < NB; ++j) _mm512_storeu_ps(c + r * ldc + n0 + 16 * j, acc[r][j]);
}

// The range's columns, 3 blocks of 16 at a time (the last two 2 wide where
// 3s would leave 1).
void product_dots(const uint16_t* a, int64_t lda, const uint16_t* pairs, const CausalTiles& range,
                  int64_t N, float* c, int64_t ldc) {
  const int64_t p_begin = range.k_begin / 2, p_end = range.k_end / 2, blocks = range.n_end / 16;
  int64_t nb = 0;
  for (; blocks - nb >= 5 || blocks - nb == 3; nb += 3)
    dot_rows<3>(a, lda, pairs, p_begin, p_end, N, 16 * nb, c, ldc);
  for (; nb + 2 <= blocks; nb += 2) dot_rows<2>(a, lda, pairs, p_begin, p_end, N, 16 * nb, c, ldc);
  if (nb < blocks) dot_rows<1>(a, lda, pairs, p_begin, p_end, N, 16 * nb, c, ldc);
}

// How an engine steps through the product: rows per block, and the steps
// of its sums over k and of its columns.
struct Steps {
  int64_t rows, k, columns;
};

Steps steps_of(Bf16Engine engine) {
  return engine == Bf16Engine::tiles ? Steps{kTileRows, kTileK, kTileColumns}
                                     : Steps{kDotRows, kDotK, 16};
}

// Rows [m, m + steps.rows) of out, as far as the causal part needs: f32 into
// c (row stride N).
void product_block(Bf16Engine engine, const uint16_t* a_rows, int64_t K, const uint16_t* pairs,
                   const CausalTiles& range, int64_t N, float* c) {
  if (engine == Bf16Engine::tiles) {
    product_tiles(a_rows, K, pairs, range, N, c, N);
  } else {
    product_dots(a_rows, K, pairs, range, N, c, N);
  }
}

}  // namespace

bool bf16_batched_matmul_applies(const Tensor& a, const Tensor& out, const MatmulOptions& options,
                                 int64_t M, int64_t K, int64_t N, bool shared_b) {
  return a.dtype() == DType::bf16 && (out.dtype() == DType::f32 || out.dtype() == DType::bf16) &&
         options.activation == Activation::none && !shared_b && M % 16 == 0 && N % 16 == 0 &&
         K % 32 == 0 && M > 0 && N > 0 && K > 0 && M <= kMaxSide && N <= kMaxSide &&
         K <= kMaxSide && fastest_bf16_engine().has_value();
}

void bf16_batched_matmul(const Tensor& a, const Tensor& b, Tensor& out,
                         const MatmulOptions& options, int64_t batch, int64_t M, int64_t K,
                         int64_t N, std::optional<CausalPart> part, Bf16Engine engine) {
  const auto* as = static_cast<const uint16_t*>(a.raw_data());
  const auto* bs = static_cast<const uint16_t*>(b.raw_data());
  const bool f32 = out.dtype() == DType::f32;
  const Steps steps = steps_of(engine);
  count_flops(batch * causal_flops(part, M, K, N, steps.rows, steps.k, steps.columns));
  parallel_for(batch, 1, [&](int64_t i0, int64_t i1) {
    std::vector<uint16_t> at(options.transpose_a ? static_cast<size_t>(M * K) : 0);
    std::vector<uint16_t> pairs(static_cast<size_t>(K * N));
    std::vector<float> rows(f32 ? 0 : static_cast<size_t>(steps.rows * N));
    std::optional<TileScope> tiles;
    if (engine == Bf16Engine::tiles) tiles.emplace();
    for (int64_t i = i0; i < i1; ++i) {
      const uint16_t* ai = as + i * M * K;
      if (options.transpose_a) {
        transpose_rows(ai, K, M, at.data());
        ai = at.data();
      }
      pair_rows(bs + i * K * N, K, N, options.transpose_b, pairs.data());
      for (int64_t m = 0; m < M; m += steps.rows) {
        const CausalTiles range = causal_tiles(part, m, steps.rows, K, N, steps.k, steps.columns);
        if (f32) {
          product_block(engine, ai + m * K, K, pairs.data(), range, N,
                        out.data<float>() + (i * M + m) * N);
          continue;
        }
        product_block(engine, ai + m * K, K, pairs.data(), range, N, rows.data());
        auto* c = static_cast<uint16_t*>(out.raw_data()) + (i * M + m) * N;
        if (range.n_end == N) {
          convert_on_this_thread(rows.data(), DType::f32, c, DType::bf16, steps.rows * N);
          continue;
        }
        for (int64_t r = 0; r < steps.rows; ++r) {
          convert_on_this_thread(rows.data() + r * N, DType::f32, c + r * N, DType::bf16,
                                 range.n_end);
        }
      }
    }
  });
}

}  // namespace tandem::kernels::detail
