#include "tandem/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/base/random.h"
#include "tandem/base/target_clones.h"
#include "tandem/kernels/detail/attention_rows.h"
#include "tandem/kernels/detail/attention_rows_avx512.h"
#include "tandem/kernels/detail/avx512_lanes.h"
#include "tandem/kernels/detail/causal_products.h"
#include "tandem/kernels/detail/checks.h"
#include "tandem/kernels/detail/dispatch.h"
#include "tandem/kernels/detail/fast_exp.h"
#include "tandem/kernels/matmul.h"

namespace tandem::kernels {
namespace {

using detail::fast_exp;

// Scores of at most this many bytes exist at once (per call): on the CPU,
// what a core's L2 holds beside the probabilities (gpt's bf16 step on an
// AMX Xeon: 66.9 sequences/s with 8 MiB, 73.5 with 256 KiB, 69 with one
// 64 KiB head per call); 512 KiB holds all 8 of gpt's heads of a sequence,
// whose q, k and v then sit together in memory for attention_interleaved's
// gathers (after the gathers were reordered: bf16 95.5 against 94.7, f32
// 28.2 against 27.7, 3 interleaved rounds); on a GPU, enough heads at once
// to fill the device.
constexpr int64_t kScratchBytes = int64_t{512} << 10;
constexpr int64_t kGpuScratchBytes = int64_t{256} << 20;

struct Dims {
  int64_t B, H, T, S, D;
  int64_t heads() const { return B * H; }
};

Dims check_inputs(const Tensor& q, const Tensor& k, const Tensor& v,
                  const AttentionOptions& options) {
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4) {
    TANDEM_THROW(ShapeError, "attention needs q, k, v of rank 4 (B, H, T, D), got ",
                 q.shape().to_string(), ", ", k.shape().to_string(), ", ", v.shape().to_string());
  }
  const Dims d{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3)};
  if (k.shape() != Shape{d.B, d.H, d.S, d.D} || v.shape() != k.shape()) {
    TANDEM_THROW(ShapeError, "attention: k ", k.shape().to_string(), " and v ",
                 v.shape().to_string(), " must both be (B, H, S, D) with q's B, H, D; q is ",
                 q.shape().to_string());
  }
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype() ||
      (q.dtype() != DType::f32 && q.dtype() != DType::bf16)) {
    TANDEM_THROW(ShapeError, "attention: q, k, v must all be f32 or all bf16, got ",
                 dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), ", ", dtype_name(v.dtype()));
  }
  if (d.D == 0) {
    // Every score would be 0: nothing a head of no width could attend by.
    TANDEM_THROW(ShapeError, "attention: heads need at least one dimension, got q ",
                 q.shape().to_string());
  }
  detail::check_same_device("attention", q, {&k, &v});
  detail::check_attention_options(options);
  return d;
}

float scale_of(const AttentionOptions& options, int64_t D) {
  return options.scale > 0.0f ? options.scale
                              : 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(D, 1)));
}

// Heads [first, first + count) of a (B, H, X, D) tensor as (count, X, D).
Tensor heads(const Tensor& t, int64_t first, int64_t count) {
  return t.reshape(Shape{t.dim(0) * t.dim(1), t.dim(2), t.dim(3)}).slice(first, first + count);
}

// Keys row i sees: [0, limit).
int64_t visible(const detail::AttentionRows& r, int64_t i) {
  return r.causal ? std::min(i + 1, r.S) : r.S;
}

// The row loops below keep 16 partial results so that they vectorise.
constexpr int kLanes = 16;

TANDEM_TARGET_CLONES float scaled_max(const float* __restrict x, int64_t n, float scale) {
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] = std::max(lanes[k], x[j + k] * scale);
  float m = -std::numeric_limits<float>::infinity();
  for (float lane : lanes) m = std::max(m, lane);
  for (; j < n; ++j) m = std::max(m, x[j] * scale);
  return m;
}

// x = exp(x * scale - shift); returns the sum of the new values.
TANDEM_TARGET_CLONES float exp_in_place(float* __restrict x, int64_t n, float scale, float shift) {
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      x[j + k] = fast_exp(x[j + k] * scale - shift);
      lanes[k] += x[j + k];
    }
  }
  float sum = 0.0f;
  for (float lane : lanes) sum += lane;
  for (; j < n; ++j) {
    x[j] = fast_exp(x[j] * scale - shift);
    sum += x[j];
  }
  return sum;
}

TANDEM_TARGET_CLONES void scale_in_place(float* __restrict x, int64_t n, float factor) {
  for (int64_t j = 0; j < n; ++j) x[j] *= factor;
}

// Without dropout: the scores become the probabilities P = exp(s * scale -
// lse) and dp the gradient of the raw scores, P (dP - D) scale.
TANDEM_TARGET_CLONES void score_grads_in_place(float* __restrict s, float* __restrict dp, int64_t n,
                                               float scale, float lse, float row_dot) {
  for (int64_t j = 0; j < n; ++j) {
    const float prob = fast_exp(s[j] * scale - lse);
    dp[j] = prob * (dp[j] - row_dot) * scale;
    s[j] = prob;
  }
}

}  // namespace

namespace detail {

void check_attention_options(const AttentionOptions& options) {
  if (!(options.dropout >= 0.0f && options.dropout < 1.0f)) {
    TANDEM_THROW(InvalidArgument, "attention dropout must be in [0, 1), got ", options.dropout);
  }
  if (!(options.scale >= 0.0f) || !std::isfinite(options.scale)) {
    TANDEM_THROW(InvalidArgument, "attention scale must be finite and >= 0, got ", options.scale);
  }
}

AttentionRows::AttentionRows(const AttentionOptions& o, int64_t T_, int64_t S_, int64_t D)
    : T(T_),
      S(S_),
      scale(scale_of(o, D)),
      causal(o.causal),
      dropout(o.dropout > 0.0f),
      seed(o.seed),
      offset(o.offset),
      threshold(static_cast<uint64_t>(std::ldexp(static_cast<double>(o.dropout), 32))),
      keep_scale(1.0f / (1.0f - o.dropout)) {}

float AttentionRows::dropout_factor(int64_t h, int64_t i, int64_t j) const {
  const uint64_t index = offset + static_cast<uint64_t>((h * T + i) * S + j);
  return random_bits_at(seed, index) >= threshold ? keep_scale : 0.0f;
}

void attention_probabilities(const AttentionRows& rows, int64_t first, Tensor& scores, Tensor& lse,
                             Tensor& probs) {
  check_same_device("attention", scores, {&lse, &probs});
  TANDEM_DISPATCH_CUDA(scores, attention_probabilities(rows, first, scores, lse, probs));
  if (attention_rows_avx512_apply()) {
    attention_probabilities_avx512(rows, first, scores, lse, probs);
    return;
  }
  const int64_t count = scores.dim(0), T = rows.T, S = rows.S;
  const float scale = rows.scale;
  float* s = scores.data<float>();
  float* l = lse.data<float>();
  parallel_for(count * T, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t h = first + row / T, i = row % T;
      const int64_t limit = visible(rows, i);
      float* x = s + row * S;
      const float m = scaled_max(x, limit, scale);
      const float sum = exp_in_place(x, limit, scale, m);
      scale_in_place(x, limit, 1.0f / sum);
      std::fill(x + limit, x + S, 0.0f);
      if (rows.dropout)
        for (int64_t j = 0; j < limit; ++j) x[j] *= rows.dropout_factor(h, i, j);
      l[h * T + i] = m + std::log(sum);
    }
  });
  if (probs.raw_data() != scores.raw_data()) probs.copy_from(scores);
}

Tensor attention_row_dot(const Tensor& dout, const Tensor& out) {
  check_same_device("attention_backward", dout, {&out});
  TANDEM_DISPATCH_CUDA(dout, attention_row_dot(dout, out));
  if (attention_rows_avx512_apply()) return attention_row_dot_avx512(dout, out);
  const int64_t D = dout.dim(-1), rows = dout.numel() / std::max<int64_t>(D, 1);
  Tensor row_dot = Tensor::empty(Shape{rows}, DType::f32, dout.device());
  const Tensor dof = dout.to(DType::f32), of = out.to(DType::f32);
  const float* a = dof.data<float>();
  const float* b = of.data<float>();
  float* rd = row_dot.data<float>();
  parallel_for(rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      double acc = 0.0;
      for (int64_t c = 0; c < D; ++c) acc += static_cast<double>(a[row * D + c]) * b[row * D + c];
      rd[row] = static_cast<float>(acc);
    }
  });
  return row_dot;
}

void attention_score_grads(const AttentionRows& rows, int64_t first, Tensor& probs, Tensor& dprobs,
                           const Tensor& lse, const Tensor& row_dot, Tensor& kept,
                           Tensor& dscores) {
  check_same_device("attention_backward", probs, {&dprobs, &lse, &row_dot, &kept, &dscores});
  TANDEM_DISPATCH_CUDA(
      probs, attention_score_grads(rows, first, probs, dprobs, lse, row_dot, kept, dscores));
  if (attention_rows_avx512_apply()) {
    attention_score_grads_avx512(rows, first, probs, dprobs, lse, row_dot, kept, dscores);
    return;
  }
  // The f32 work in place (dropout's kept probabilities beside, in kept
  // when it is f32), copied into kept and dscores at the end when they are
  // other tensors.
  Tensor dropped = !rows.dropout ? probs
                   : kept.dtype() == DType::f32
                       ? kept
                       : Tensor::empty(probs.shape(), DType::f32, probs.device());
  const int64_t count = probs.dim(0), T = rows.T, S = rows.S;
  const float scale = rows.scale;
  const float* lse_v = lse.data<float>();
  const float* rd = row_dot.data<float>();
  float* p = probs.data<float>();
  float* dp = dprobs.data<float>();
  float* pd = dropped.data<float>();
  parallel_for(count * T, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t h = first + row / T, i = row % T;
      const int64_t limit = visible(rows, i);
      const float l = lse_v[h * T + i], di = rd[h * T + i];
      float* pr = p + row * S;
      float* dpr = dp + row * S;
      float* pdr = pd + row * S;
      if (rows.dropout) {
        for (int64_t j = 0; j < limit; ++j) {
          const float prob = fast_exp(pr[j] * scale - l);
          const float f = rows.dropout_factor(h, i, j);
          // dS = P (dP - D) scale, dP the gradient before dropout.
          dpr[j] = prob * (dpr[j] * f - di) * scale;
          pdr[j] = prob * f;
        }
      } else {
        score_grads_in_place(pr, dpr, limit, scale, l, di);
      }
      std::fill(dpr + limit, dpr + S, 0.0f);
      std::fill(pdr + limit, pdr + S, 0.0f);
    }
  });
  if (kept.raw_data() != dropped.raw_data()) kept.copy_from(dropped);
  if (dscores.raw_data() != dprobs.raw_data()) dscores.copy_from(dprobs);
}

namespace {

// out = op(a) op(b) for one of attention's products, skipping the causal
// triangle's blocks (part) when the mask has one.
void product(const AttentionRows& rows, const Tensor& a, const Tensor& b, Tensor& out,
             const MatmulOptions& options, CausalPart part) {
  if (rows.causal && rows.T == rows.S) {
    causal_batched_matmul(a, b, out, options, part);
  } else {
    batched_matmul_into(a, b, out, options);
  }
}

// (count, T, S) scores: op(a) op(b)^T with a (count, T, D), b (count, S, D).
Tensor scores_of(const AttentionRows& rows, const Tensor& a, const Tensor& b) {
  Tensor scores = Tensor::empty(Shape{a.dim(0), rows.T, rows.S}, DType::f32, a.device());
  product(rows, a, b, scores, {.transpose_b = true}, CausalPart::out_lower);
  return scores;
}

}  // namespace

void attention_group(const AttentionRows& rows, int64_t first, const Tensor& q, const Tensor& k,
                     const Tensor& v, Tensor& lse, Tensor& out) {
  Tensor scores = scores_of(rows, q, k);
  Tensor probs =
      q.dtype() == DType::f32 ? scores : Tensor::empty(scores.shape(), q.dtype(), q.device());
  attention_probabilities(rows, first, scores, lse, probs);
  product(rows, probs, v, out, {}, CausalPart::a_lower);
}

void attention_backward_group(const AttentionRows& rows, int64_t first, const Tensor& q,
                              const Tensor& k, const Tensor& v, const Tensor& dout,
                              const Tensor& lse, const Tensor& row_dot, AttentionGrads& grads) {
  // The probabilities again, from the scores and the kept log-sum-exp.
  Tensor probs = scores_of(rows, q, k);
  Tensor dprobs = scores_of(rows, dout, v);
  const bool f32 = q.dtype() == DType::f32;
  Tensor kept = f32 && !rows.dropout ? probs : Tensor::empty(probs.shape(), q.dtype(), q.device());
  Tensor dscores = f32 ? dprobs : Tensor::empty(probs.shape(), q.dtype(), q.device());
  attention_score_grads(rows, first, probs, dprobs, lse, row_dot, kept, dscores);
  product(rows, kept, dout, grads.dv, {.transpose_a = true}, CausalPart::a_upper);
  product(rows, dscores, k, grads.dq, {}, CausalPart::a_lower);
  product(rows, dscores, q, grads.dk, {.transpose_a = true}, CausalPart::a_upper);
}

}  // namespace detail

int64_t attention_heads_per_group(int64_t heads, int64_t T, int64_t S, Device device) {
  const int64_t per_head = std::max<int64_t>(1, T * S * static_cast<int64_t>(sizeof(float)));
  const int64_t scratch = device.kind == DeviceKind::cpu ? kScratchBytes : kGpuScratchBytes;
  return std::clamp<int64_t>(scratch / per_head, 1, std::max<int64_t>(heads, 1));
}

namespace {

// The heads attention() and its backward take at a time: the scratch's
// bound, but on AVX-512 CPUs at least one head per thread, as tandem's
// causal products there run each head on one thread (heads of 1,024
// positions, one to a group, left the other cores idle: kernels_bench
// AttentionLong). Elsewhere oneDNN's products thread within a head, and
// give other bits for other numbers of heads: the group stays the
// shapes' alone.
int64_t heads_at_a_time(int64_t heads, int64_t T, int64_t S, Device device) {
  const int64_t group = attention_heads_per_group(heads, T, S, device);
  if (device.kind != DeviceKind::cpu || !detail::has_avx512()) return group;
  return std::max(group, std::min<int64_t>(heads, num_threads()));
}

}  // namespace

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& options) {
  const Dims d = check_inputs(q, k, v, options);
  AttentionResult r;
  r.out = Tensor::empty(q.shape(), q.dtype(), q.device());
  r.lse = Tensor::empty(Shape{d.B, d.H, d.T}, DType::f32, q.device());
  if (q.numel() == 0) return r;
  if (d.S == 0) {
    // No keys: PyTorch returns NaN rows; an empty softmax has no value, so
    // the output is zero and the log-sum-exp -inf.
    r.out.zero();
    r.lse.fill(-std::numeric_limits<float>::infinity());
    return r;
  }
  const detail::AttentionRows rows(options, d.T, d.S, d.D);
  const int64_t group = heads_at_a_time(d.heads(), d.T, d.S, q.device());
  for (int64_t first = 0; first < d.heads(); first += group) {
    const int64_t count = std::min(group, d.heads() - first);
    Tensor out = heads(r.out, first, count);
    detail::attention_group(rows, first, heads(q, first, count), heads(k, first, count),
                            heads(v, first, count), r.lse, out);
  }
  return r;
}

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  const AttentionOptions& options) {
  AttentionGrads g;
  g.dq = Tensor::empty(q.shape(), q.dtype(), q.device());
  g.dk = Tensor::empty(k.shape(), k.dtype(), k.device());
  g.dv = Tensor::empty(v.shape(), v.dtype(), v.device());
  attention_backward_into(dout, q, k, v, out, lse, options, g);
  return g;
}

void attention_backward_into(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, const AttentionOptions& options,
                             AttentionGrads& g) {
  const Dims d = check_inputs(q, k, v, options);
  if (dout.shape() != q.shape() || dout.dtype() != q.dtype() || out.shape() != q.shape() ||
      out.dtype() != q.dtype() || lse.shape() != Shape{d.B, d.H, d.T} ||
      lse.dtype() != DType::f32) {
    TANDEM_THROW(ShapeError, "attention_backward: dout ", dout.to_string(), ", out ",
                 out.to_string(), " and lse ", lse.to_string(), " do not fit q ", q.to_string());
  }
  for (const auto& [grad, like] : {std::pair{&g.dq, &q}, {&g.dk, &k}, {&g.dv, &v}}) {
    if (grad->shape() != like->shape() || grad->dtype() != like->dtype() ||
        grad->device() != like->device()) {
      TANDEM_THROW(ShapeError, "attention_backward: gradient ", grad->to_string(),
                   " does not fit its input ", like->to_string());
    }
  }
  if (q.numel() == 0 || k.numel() == 0) {
    g.dq.zero();
    g.dk.zero();
    g.dv.zero();
    return;
  }
  const detail::AttentionRows rows(options, d.T, d.S, d.D);
  const int64_t group = heads_at_a_time(d.heads(), d.T, d.S, q.device());
  const Tensor row_dot = detail::attention_row_dot(dout, out);
  for (int64_t first = 0; first < d.heads(); first += group) {
    const int64_t count = std::min(group, d.heads() - first);
    AttentionGrads grads{heads(g.dq, first, count), heads(g.dk, first, count),
                         heads(g.dv, first, count)};
    detail::attention_backward_group(rows, first, heads(q, first, count), heads(k, first, count),
                                     heads(v, first, count), heads(dout, first, count), lse,
                                     row_dot, grads);
  }
}

}  // namespace tandem::kernels
