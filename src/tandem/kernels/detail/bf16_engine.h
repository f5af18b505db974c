#pragma once
// Private: how tandem's own bf16 product kernels (the weight gradients of
// linear layers and convolutions, attention's small batched products)
// multiply: on the AMX tiles, or, on CPUs
// with AVX512-BF16 but no AMX (AMD Zen 4), by its dot products
// (vdpbf16ps: 16 f32 lanes each gaining a pair of bf16 products). Both
// take the operands in pairs of rows, so the kernels share their layouts.

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "tandem/kernels/detail/amx.h"
#include "tandem/kernels/detail/avx512_lanes.h"

namespace tandem::kernels::detail {

enum class Bf16Engine { tiles, dot_products };

// Whether this CPU (within TANDEM_MAX_CPU_ISA) runs the engine.
inline bool bf16_engine_runs(Bf16Engine engine) {
  return engine == Bf16Engine::tiles ? has_amx_bf16() : has_avx512_bf16();
}

// The tiles where the CPU has them, else the dot products; none without
// AVX512-BF16.
inline std::optional<Bf16Engine> fastest_bf16_engine() {
  if (has_amx_bf16()) return Bf16Engine::tiles;
  if (has_avx512_bf16()) return Bf16Engine::dot_products;
  return std::nullopt;
}

// The engines this CPU runs, the tiles first: the tests run each.
inline std::vector<Bf16Engine> bf16_engines_here() {
  std::vector<Bf16Engine> out;
  for (Bf16Engine e : {Bf16Engine::tiles, Bf16Engine::dot_products})
    if (bf16_engine_runs(e)) out.push_back(e);
  return out;
}

inline const char* bf16_engine_name(Bf16Engine engine) {
  return engine == Bf16Engine::tiles ? "tiles" : "dot products";
}

// The dot products' step, shared by their kernels: acc[j] += the pair of
// bf16 at `pair` (two adjacent values, broadcast to every lane) times the
// 16 pairs in b[j], for j < NB.
template <int NB>
TANDEM_AVX512_BF16 inline void dot_pair(__m512 (&acc)[NB], const uint16_t* pair,
                                        const __m512bh (&b)[NB]) {
  int32_t bits;
  std::memcpy(&bits, pair, sizeof bits);
  const auto a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(bits));
  for (int j = 0; j < NB; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b[j]);
}

}  // namespace tandem::kernels::detail
