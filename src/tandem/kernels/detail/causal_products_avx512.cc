#include "tandem/kernels/detail/causal_products_avx512.h"

#include <algorithm>
#include <vector>

#include "tandem/base/parallel.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/kernels/flops.h"

namespace tandem::kernels::detail {
namespace {

constexpr int64_t kRows = 8;  // output rows per register tile

// op(a) of one batch entry: element (i, k) at data[i * row + k * col].
struct Lhs {
  const float* data;
  int64_t row, col;
};

// The sum over k in [k0, k1) of op(a)(m + r, k) b(k, n0 + c) for r < 8 and
// c < 16 Vectors (1 or 2) into c's rows m .. m + 7 (row stride ldc); b as
// K rows of ldb floats.
template <int Vectors>
TANDEM_AVX512 void tile(Lhs a, int64_t m, const float* b, int64_t ldb, int64_t n0, int64_t k0,
                        int64_t k1, float* c, int64_t ldc) {
  __m512 acc[kRows][Vectors];
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < Vectors; ++v) acc[r][v] = _mm512_setzero_ps();
  const float* lhs = a.data + m * a.row;
  for (int64_t k = k0; k < k1; ++k) {
    __m512 rhs[Vectors];
    for (int v = 0; v < Vectors; ++v) rhs[v] = _mm512_loadu_ps(b + k * ldb + n0 + 16 * v);
    for (int r = 0; r < kRows; ++r) {
      const __m512 x = _mm512_set1_ps(lhs[r * a.row + k * a.col]);
      for (int v = 0; v < Vectors; ++v) acc[r][v] = _mm512_fmadd_ps(x, rhs[v], acc[r][v]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < Vectors; ++v) _mm512_storeu_ps(c + (m + r) * ldc + n0 + 16 * v, acc[r][v]);
}

// bt (K x N) from b stored (N x K), 16 x 16 at a time; K a multiple of 16
// or not (the rest element by element).
TANDEM_AVX512 void transpose_rhs(const float* b, int64_t N, int64_t K, float* bt) {
  const int64_t K16 = K / 16 * 16;
  for (int64_t n0 = 0; n0 < N; n0 += 16) {
    for (int64_t k0 = 0; k0 < K16; k0 += 16) {
      __m512i r[16];
      for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_si512(b + (n0 + j) * K + k0);
      transpose16(r);
      for (int j = 0; j < 16; ++j) _mm512_storeu_si512(bt + (k0 + j) * N + n0, r[j]);
    }
    for (int64_t n = n0; n < n0 + 16; ++n)
      for (int64_t k = K16; k < K; ++k) bt[k * N + n] = b[n * K + k];
  }
}

// What rows [m, m + 8) need (causal_tiles): any k, columns in steps of 16.
CausalTiles range_of(CausalPart part, int64_t m, int64_t K, int64_t N) {
  return causal_tiles(part, m, kRows, K, N, 1, 16);
}

TANDEM_AVX512 void entry(Lhs a, const float* b, int64_t ldb, float* c, int64_t M, int64_t K,
                         int64_t N, CausalPart part) {
  for (int64_t m = 0; m < M; m += kRows) {
    const CausalTiles r = range_of(part, m, K, N);
    int64_t n0 = 0;
    for (; n0 + 32 <= r.n_end; n0 += 32) tile<2>(a, m, b, ldb, n0, r.k_begin, r.k_end, c, N);
    if (n0 < r.n_end) tile<1>(a, m, b, ldb, n0, r.k_begin, r.k_end, c, N);
  }
}

}  // namespace

bool causal_products_avx512_apply(const Tensor& a, const Tensor& out, const MatmulOptions& options,
                                  int64_t M, int64_t N, bool shared_b) {
  return a.dtype() == DType::f32 && out.dtype() == DType::f32 &&
         options.activation == Activation::none && !shared_b && M % kRows == 0 && N % 16 == 0 &&
         M > 0 && N > 0 && has_avx512();
}

void causal_products_avx512(const Tensor& a, const Tensor& b, Tensor& out,
                            const MatmulOptions& options, int64_t batch, int64_t M, int64_t K,
                            int64_t N, CausalPart part) {
  const float* as = a.data<float>();
  const float* bs = b.data<float>();
  float* cs = out.data<float>();
  count_flops(batch * causal_flops(part, M, K, N, kRows, 1, 16));
  parallel_for(batch, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> bt(options.transpose_b ? static_cast<size_t>(K * N) : 0);
    for (int64_t i = i0; i < i1; ++i) {
      const float* ai = as + i * M * K;
      const Lhs lhs = options.transpose_a ? Lhs{ai, 1, M} : Lhs{ai, K, 1};
      const float* bi = bs + i * K * N;
      if (options.transpose_b) {
        transpose_rhs(bi, N, K, bt.data());
        bi = bt.data();
      }
      entry(lhs, bi, N, cs + i * M * N, M, K, N, part);
    }
  });
}

}  // namespace tandem::kernels::detail
