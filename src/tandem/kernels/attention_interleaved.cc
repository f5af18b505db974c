// attention_interleaved: attention() over a fused QKV projection's output
// without permuting it. gpt's permutes (qkv to (3, B, H, T, D), the output
// back to (B, T, H, D), both again in backward) took 5-8% of its step.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "tandem/base/error.h"
#include "tandem/base/parallel.h"
#include "tandem/kernels/attention.h"
#include "tandem/kernels/detail/attention_rows.h"
#include "tandem/kernels/detail/checks.h"
#include "tandem/kernels/layout.h"
#include "tandem/tensor/allocator.h"

namespace tandem::kernels {
namespace {

struct Interleaved {
  int64_t B, T, H, D;
  int64_t heads() const { return B * H; }
  Shape heads_shape() const { return Shape{B, H, T, D}; }  // attention()'s q
  Shape out_shape() const { return Shape{B, T, H, D}; }
};

Interleaved check_qkv(const Tensor& qkv, const char* op) {
  if (qkv.rank() != 5 || qkv.dim(2) != 3) {
    TANDEM_THROW(ShapeError, op, ": qkv must be (B, T, 3, H, D), got ", qkv.shape().to_string());
  }
  if (qkv.dtype() != DType::f32 && qkv.dtype() != DType::bf16) {
    TANDEM_THROW(ShapeError, op, ": qkv must be f32 or bf16, got ", dtype_name(qkv.dtype()));
  }
  if (qkv.dim(4) == 0) {
    TANDEM_THROW(ShapeError, op, ": heads need at least one dimension, got qkv ",
                 qkv.shape().to_string());
  }
  return {qkv.dim(0), qkv.dim(1), qkv.dim(3), qkv.dim(4)};
}

// One row of D elements (64 bytes for gpt's bf16 heads), copied inline in
// 16-byte moves: a call per row (memcpy, or an AVX-512 copy behind a CPU
// check) cost more than the copy, half a million rows per layer.
inline void copy_row(char* __restrict to, const char* __restrict from, size_t bytes) {
  size_t i = 0;
  for (; i + 16 <= bytes; i += 16) __builtin_memcpy(to + i, from + i, 16);
  for (; i < bytes; i += 2) __builtin_memcpy(to + i, from + i, 2);  // elements are 2 or 4 bytes
}

// The rows are strided (3 H D elements apart in qkv), which the hardware's
// prefetchers did not follow: without these, the gathers and scatters
// took 7% of gpt's f32 step, more than the permutes they replace.
constexpr int64_t kAhead = 8;

inline void prefetch_row(const char* row, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64) __builtin_prefetch(row + i);
}

// The parts of a (B, T, parts, H, D) tensor, heads [first, first + count)
// of its B * H, to or from one (count, T, D) tensor per part.
struct HeadRows {
  const Interleaved& s;
  int64_t first, count;

  // copy(part, row of the interleaved tensor, row of the heads tensors, the
  // interleaved row kAhead positions on) for each row of D elements,
  // positions outermost and all parts in one pass: each position's rows of
  // the group's heads sit side by side in memory. (Heads outermost and a
  // pass per part read one line in 3 H, 1,536 bytes apart for gpt, which
  // the prefetchers left at 5 GB/s: 9% of its bf16 step.)
  template <typename Copy>
  void each(int64_t parts, Copy copy) const {
    std::vector<int64_t> at_zero(static_cast<size_t>(count));
    for (int64_t local = 0; local < count; ++local) {
      const int64_t head = first + local, b = head / s.H, h = head % s.H;
      at_zero[static_cast<size_t>(local)] = b * s.T * parts * s.H + h;
    }
    const int64_t step = parts * s.H;
    parallel_for(s.T, 16, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const int64_t ahead = std::min(t + kAhead, s.T - 1) * step;
        for (int64_t part = 0; part < parts; ++part) {
          for (int64_t local = 0; local < count; ++local) {
            const int64_t big = at_zero[static_cast<size_t>(local)] + part * s.H;
            copy(part, big + t * step, local * s.T + t, big + ahead);
          }
        }
      }
    });
  }
  void gather(const Tensor& interleaved, const std::vector<Tensor*>& heads) const {
    const size_t bytes = static_cast<size_t>(s.D) * dtype_size(interleaved.dtype());
    const auto* from = static_cast<const char*>(interleaved.raw_data());
    std::vector<char*> to;
    for (Tensor* t : heads) to.push_back(static_cast<char*>(t->raw_data()));
    each(std::ssize(heads), [&](int64_t part, int64_t big, int64_t small, int64_t ahead) {
      prefetch_row(from + ahead * bytes, bytes);
      copy_row(to[static_cast<size_t>(part)] + small * bytes, from + big * bytes, bytes);
    });
  }
  void scatter(const std::vector<const Tensor*>& heads, Tensor& interleaved) const {
    const size_t bytes = static_cast<size_t>(s.D) * dtype_size(interleaved.dtype());
    std::vector<const char*> from;
    for (const Tensor* t : heads) from.push_back(static_cast<const char*>(t->raw_data()));
    auto* to = static_cast<char*>(interleaved.raw_data());
    each(std::ssize(heads), [&](int64_t part, int64_t big, int64_t small, int64_t ahead) {
      prefetch_row(to + ahead * bytes, bytes);
      copy_row(to + big * bytes, from[static_cast<size_t>(part)] + small * bytes, bytes);
    });
  }
};

// The groups of `group` heads split between the threads, each thread
// taking whole groups in turn: body(first, count, worker), worker < the
// returned count of workers, for the caller's per-thread scratch. Each
// group's gathers, products and scatters run on one core: with the team
// sharing every group (8 heads of 128 positions in gpt, a few hundred KiB)
// the fork and join per copy and product, and the rows one core wrote read
// by the other, made the gathers 2.4x slower at 2 threads than at 1 on
// Zen 4. A group's results do not depend on the thread that runs it; its
// temporaries keep the caller's memory category on every thread.
int64_t group_count(const Interleaved& s, int64_t group) {
  return (s.heads() + group - 1) / group;
}

int64_t group_workers(const Interleaved& s, int64_t group) {
  return std::min<int64_t>(num_threads(), group_count(s, group));
}

template <typename Body>
void each_group(const Interleaved& s, int64_t group, int64_t workers, Body body) {
  const int64_t groups = group_count(s, group);
  const MemoryCategory category = default_memory_category();
  parallel_for(workers, 1, [&](int64_t w0, int64_t w1) {
    const MemoryCategoryScope same_category(category);
    for (int64_t w = w0; w < w1; ++w) {
      for (int64_t g = w * groups / workers; g < (w + 1) * groups / workers; ++g) {
        body(g * group, std::min(group, s.heads() - g * group), w);
      }
    }
  });
}

// Worker w's part of a (workers, group, T, D) scratch tensor, its first
// count heads.
Tensor worker_heads(const Tensor& scratch, int64_t w, int64_t count) {
  return scratch.slice(w, w + 1)
      .reshape(Shape{scratch.dim(1), scratch.dim(2), scratch.dim(3)})
      .slice(0, count);
}

// The thirds of qkv as attention()'s (B, H, T, D) tensors, by permuting.
std::vector<Tensor> permuted_thirds(const Tensor& qkv, const Interleaved& s) {
  const Tensor all = permute(qkv, std::vector<int>{2, 0, 3, 1, 4});
  return {all.slice(0, 1).reshape(s.heads_shape()), all.slice(1, 2).reshape(s.heads_shape()),
          all.slice(2, 3).reshape(s.heads_shape())};
}

}  // namespace

AttentionResult attention_interleaved(const Tensor& qkv, const AttentionOptions& options) {
  const Interleaved s = check_qkv(qkv, "attention_interleaved");
  if (qkv.device().kind != DeviceKind::cpu) {
    const std::vector<Tensor> qkv3 = permuted_thirds(qkv, s);
    AttentionResult r = attention(qkv3[0], qkv3[1], qkv3[2], options);
    r.out = permute(r.out, std::vector<int>{0, 2, 1, 3});
    return r;
  }
  detail::check_attention_options(options);
  AttentionResult r;
  r.out = Tensor::empty(s.out_shape(), qkv.dtype(), qkv.device());
  r.lse = Tensor::empty(Shape{s.B, s.H, s.T}, DType::f32, qkv.device());
  if (qkv.numel() == 0) return r;
  const detail::AttentionRows rows(options, s.T, s.T, s.D);
  const int64_t group = attention_heads_per_group(s.heads(), s.T, s.T, qkv.device());
  const int64_t workers = group_workers(s, group);
  MemoryCategoryScope scratch_memory(MemoryCategory::workspace);
  const Shape scratch{workers, group, s.T, s.D};
  const auto scratch_tensor = [&] { return Tensor::empty(scratch, qkv.dtype(), qkv.device()); };
  Tensor q = scratch_tensor(), k = scratch_tensor(), v = scratch_tensor(), out = scratch_tensor();
  each_group(s, group, workers, [&](int64_t first, int64_t count, int64_t w) {
    Tensor qg = worker_heads(q, w, count), kg = worker_heads(k, w, count),
           vg = worker_heads(v, w, count), og = worker_heads(out, w, count);
    const HeadRows heads{s, first, count};
    heads.gather(qkv, {&qg, &kg, &vg});
    detail::attention_group(rows, first, qg, kg, vg, r.lse, og);
    heads.scatter({&og}, r.out);
  });
  return r;
}

Tensor attention_interleaved_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                      const Tensor& lse, const AttentionOptions& options) {
  const Interleaved s = check_qkv(qkv, "attention_interleaved_backward");
  if (dout.shape() != s.out_shape() || dout.dtype() != qkv.dtype() ||
      out.shape() != s.out_shape() || out.dtype() != qkv.dtype() ||
      lse.shape() != Shape{s.B, s.H, s.T} || lse.dtype() != DType::f32) {
    TANDEM_THROW(ShapeError, "attention_interleaved_backward: dout ", dout.to_string(), ", out ",
                 out.to_string(), " and lse ", lse.to_string(), " do not fit qkv ",
                 qkv.to_string());
  }
  detail::check_same_device("attention_interleaved_backward", qkv, {&dout, &out, &lse});
  if (qkv.device().kind != DeviceKind::cpu) {
    const std::vector<Tensor> qkv3 = permuted_thirds(qkv, s);
    const std::vector<int> heads_first{0, 2, 1, 3};
    const AttentionGrads g = attention_backward(permute(dout, heads_first), qkv3[0], qkv3[1],
                                                qkv3[2], permute(out, heads_first), lse, options);
    const Shape one{1, s.B, s.H, s.T, s.D};
    const std::vector<Tensor> thirds{g.dq.reshape(one), g.dk.reshape(one), g.dv.reshape(one)};
    const Tensor all = concat(thirds, 0);
    return permute(all, std::vector<int>{1, 3, 0, 2, 4});
  }
  detail::check_attention_options(options);
  Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype(), qkv.device());
  if (qkv.numel() == 0) return dqkv;
  const detail::AttentionRows rows(options, s.T, s.T, s.D);
  const int64_t group = attention_heads_per_group(s.heads(), s.T, s.T, qkv.device());
  Tensor row_dot = Tensor::empty(Shape{s.heads() * s.T}, DType::f32, qkv.device());
  const int64_t workers = group_workers(s, group);
  MemoryCategoryScope scratch_memory(MemoryCategory::workspace);
  const Shape scratch{workers, group, s.T, s.D};
  std::vector<Tensor> parts;  // q, k, v, dout, out, dq, dk, dv
  for (int i = 0; i < 8; ++i) parts.push_back(Tensor::empty(scratch, qkv.dtype(), qkv.device()));
  each_group(s, group, workers, [&](int64_t first, int64_t count, int64_t w) {
    std::vector<Tensor> g;
    for (const Tensor& t : parts) g.push_back(worker_heads(t, w, count));
    const HeadRows heads{s, first, count};
    heads.gather(qkv, {&g[0], &g[1], &g[2]});
    heads.gather(dout, {&g[3]});
    heads.gather(out, {&g[4]});
    row_dot.slice(first * s.T, (first + count) * s.T)
        .copy_from(detail::attention_row_dot(g[3], g[4]).reshape(Shape{count * s.T}));
    AttentionGrads grads{g[5], g[6], g[7]};
    detail::attention_backward_group(rows, first, g[0], g[1], g[2], g[3], lse, row_dot, grads);
    heads.scatter({&g[5], &g[6], &g[7]}, dqkv);
  });
  return dqkv;
}

}  // namespace tandem::kernels
