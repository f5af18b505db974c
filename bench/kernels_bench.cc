// Microbenchmarks of the kernels on the shapes of the reference models
// (batch 128), f32 and bf16. Run: build/bench/kernels_bench
#include <benchmark/benchmark.h>

#include "tandem/base/random.h"
#include "tandem/kernels/activation.h"
#include "tandem/kernels/attention.h"
#include "tandem/kernels/conv.h"
#include "tandem/kernels/detail/causal_products.h"
#include "tandem/kernels/detail/gelu_avx512.h"
#include "tandem/kernels/elementwise.h"
#include "tandem/kernels/matmul.h"
#include "tandem/kernels/normalization.h"
#include "tandem/kernels/pool.h"
#include "tandem/kernels/reduce.h"
#include "tandem/tensor/tensor.h"

namespace {

using namespace tandem;

Tensor random(const Shape& shape, DType dtype, float bound = 1.0f) {
  Tensor t = Tensor::empty(shape);
  Generator(1).uniform(t.data<float>(), t.numel(), -bound, bound);
  return t.to(dtype);
}

void Matmul(benchmark::State& state, int64_t M, int64_t K, int64_t N, DType dtype) {
  const Tensor a = random(Shape{M, K}, dtype), b = random(Shape{N, K}, dtype);
  for (auto _ : state) benchmark::DoNotOptimize(kernels::matmul(a, b, {}, {.transpose_b = true}));
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * M * K * N, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// A linear layer's weight gradient: dy^T x over the batch's rows, into f32.
void WeightGradient(benchmark::State& state, int64_t rows, int64_t out, int64_t in, DType dtype) {
  const Tensor dy = random(Shape{rows, out}, dtype), x = random(Shape{rows, in}, dtype);
  Tensor dw = Tensor::empty(Shape{out, in});
  for (auto _ : state) kernels::matmul_into(dy, x, {}, dw, {.transpose_a = true});
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * rows * out * in, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

void ConvForward(benchmark::State& state, Shape x_shape, Shape w_shape, DType dtype) {
  const Tensor x = random(x_shape, dtype), w = random(w_shape, dtype);
  const kernels::Conv2dGeometry g{.pad_h = 1, .pad_w = 1};
  for (auto _ : state) benchmark::DoNotOptimize(kernels::conv2d_forward(x, w, {}, g));
  const double flops = 2.0 * x_shape[0] * x_shape[1] * x_shape[2] * w_shape[0] * w_shape[1] *
                       w_shape[2] * w_shape[3];
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void ConvBackwardWeights(benchmark::State& state, Shape x_shape, Shape w_shape, DType dtype) {
  const Tensor x = random(x_shape, dtype);
  const kernels::Conv2dGeometry g{.pad_h = 1, .pad_w = 1};
  const Tensor dy = random(kernels::conv2d_output_shape(x_shape, w_shape, g), dtype);
  Tensor dw = Tensor::empty(w_shape), db = Tensor::empty(Shape{w_shape[3]});
  for (auto _ : state) kernels::conv2d_backward_weights(x, dy, g, dw, &db);
  const double flops = 2.0 * x_shape[0] * x_shape[1] * x_shape[2] * w_shape[0] * w_shape[1] *
                       w_shape[2] * w_shape[3];
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void MaxPool(benchmark::State& state, Shape x_shape, DType dtype) {
  const Tensor x = random(x_shape, dtype);
  for (auto _ : state) benchmark::DoNotOptimize(kernels::max_pool2d_forward(x, {}, true));
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(x.nbytes()),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void MaxPoolBackward(benchmark::State& state, Shape x_shape, DType dtype) {
  const Tensor x = random(x_shape, dtype);
  const kernels::MaxPoolResult r = kernels::max_pool2d_forward(x, {}, true);
  for (auto _ : state) {
    benchmark::DoNotOptimize(kernels::max_pool2d_backward(r.y, r.workspace, x_shape, {}));
  }
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(x.nbytes()),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// The cnn's first convolution and pooling (x f32 or bf16, the output in
// x's dtype): the ops composed (the convolution's output stored, then
// pooled) or fused (conv2d_max_pool_relu_forward pools it in cache).
void ConvMaxPool(benchmark::State& state, DType dtype, bool fused) {
  const Shape x_shape{128, 28, 28, 1}, w_shape{3, 3, 1, 32};
  const Tensor x = random(x_shape, dtype), w = random(w_shape, dtype);
  const Tensor bias = random(Shape{32}, DType::f32);
  const kernels::Conv2dGeometry g{.pad_h = 1, .pad_w = 1};
  for (auto _ : state) {
    if (fused) {
      benchmark::DoNotOptimize(
          kernels::conv2d_max_pool_relu_forward(x, w, bias, g, {}, dtype, true));
    } else {
      const Tensor y = kernels::conv2d_forward(x, w, bias, g, kernels::Activation::none, dtype);
      benchmark::DoNotOptimize(kernels::max_pool2d_forward(y, {}, true, true));
    }
  }
}

// Its weight gradient from the pooled gradient: composed (the pooling's
// backward stores the convolution's output gradient) or fused.
void ConvMaxPoolBackward(benchmark::State& state, DType dtype, bool fused) {
  const Shape x_shape{128, 28, 28, 1}, w_shape{3, 3, 1, 32};
  const Tensor x = random(x_shape, dtype), w = random(w_shape, dtype);
  const kernels::Conv2dGeometry g{.pad_h = 1, .pad_w = 1};
  const kernels::MaxPoolResult r =
      kernels::conv2d_max_pool_relu_forward(x, w, Tensor(), g, {}, dtype, true);
  const Tensor dy = random(r.y.shape(), dtype);
  Tensor dw = Tensor::empty(w_shape), db = Tensor::empty(Shape{32});
  for (auto _ : state) {
    if (fused) {
      kernels::conv2d_max_pool_backward_weights(x, dy, r.workspace, g, {}, dw, &db);
    } else {
      const Tensor dy_conv = kernels::max_pool2d_backward(
          dy, r.workspace, kernels::conv2d_output_shape(x_shape, w_shape, g), {});
      kernels::conv2d_backward_weights(x, dy_conv, g, dw, &db);
    }
  }
}

BENCHMARK_CAPTURE(ConvMaxPool, cnn1_f32_composed, DType::f32, false);
BENCHMARK_CAPTURE(ConvMaxPool, cnn1_f32_fused, DType::f32, true);
BENCHMARK_CAPTURE(ConvMaxPool, cnn1_bf16_composed, DType::bf16, false);
BENCHMARK_CAPTURE(ConvMaxPool, cnn1_bf16_fused, DType::bf16, true);
BENCHMARK_CAPTURE(ConvMaxPoolBackward, cnn1_f32_composed, DType::f32, false);
BENCHMARK_CAPTURE(ConvMaxPoolBackward, cnn1_f32_fused, DType::f32, true);
BENCHMARK_CAPTURE(ConvMaxPoolBackward, cnn1_bf16_composed, DType::bf16, false);
BENCHMARK_CAPTURE(ConvMaxPoolBackward, cnn1_bf16_fused, DType::bf16, true);

BENCHMARK_CAPTURE(Matmul, mlp_784x512_f32, 128, 784, 512, DType::f32);
BENCHMARK_CAPTURE(Matmul, mlp_784x512_bf16, 128, 784, 512, DType::bf16);
BENCHMARK_CAPTURE(Matmul, cnn_3136x128_f32, 128, 3136, 128, DType::f32);
BENCHMARK_CAPTURE(Matmul, cnn_3136x128_bf16, 128, 3136, 128, DType::bf16);
// gpt's (128 sequences of 128 positions): fc1, fc2, the attention's qkv.
BENCHMARK_CAPTURE(WeightGradient, gpt_fc1_f32, 16384, 1024, 256, DType::f32);
BENCHMARK_CAPTURE(WeightGradient, gpt_fc1_bf16, 16384, 1024, 256, DType::bf16);
BENCHMARK_CAPTURE(WeightGradient, gpt_fc2_bf16, 16384, 256, 1024, DType::bf16);
BENCHMARK_CAPTURE(WeightGradient, gpt_qkv_bf16, 16384, 768, 256, DType::bf16);
BENCHMARK_CAPTURE(WeightGradient, gpt_proj_bf16, 16384, 256, 256, DType::bf16);
BENCHMARK_CAPTURE(ConvForward, conv2_f32, Shape{128, 14, 14, 32}, Shape{3, 3, 32, 64}, DType::f32);
BENCHMARK_CAPTURE(ConvForward, conv2_bf16, Shape{128, 14, 14, 32}, Shape{3, 3, 32, 64},
                  DType::bf16);
BENCHMARK_CAPTURE(ConvForward, conv1_f32, Shape{128, 28, 28, 1}, Shape{3, 3, 1, 32}, DType::f32);
BENCHMARK_CAPTURE(ConvForward, conv1_bf16, Shape{128, 28, 28, 1}, Shape{3, 3, 1, 32}, DType::bf16);
BENCHMARK_CAPTURE(ConvBackwardWeights, conv1_f32, Shape{128, 28, 28, 1}, Shape{3, 3, 1, 32},
                  DType::f32);
BENCHMARK_CAPTURE(ConvBackwardWeights, conv1_bf16, Shape{128, 28, 28, 1}, Shape{3, 3, 1, 32},
                  DType::bf16);
BENCHMARK_CAPTURE(ConvBackwardWeights, conv2_f32, Shape{128, 14, 14, 32}, Shape{3, 3, 32, 64},
                  DType::f32);
BENCHMARK_CAPTURE(ConvBackwardWeights, conv2_bf16, Shape{128, 14, 14, 32}, Shape{3, 3, 32, 64},
                  DType::bf16);
BENCHMARK_CAPTURE(ConvBackwardWeights, resnet16_f32, Shape{128, 28, 28, 16}, Shape{3, 3, 16, 16},
                  DType::f32);
BENCHMARK_CAPTURE(ConvBackwardWeights, resnet16_bf16, Shape{128, 28, 28, 16}, Shape{3, 3, 16, 16},
                  DType::bf16);
BENCHMARK_CAPTURE(ConvBackwardWeights, resnet64_bf16, Shape{128, 7, 7, 64}, Shape{3, 3, 64, 64},
                  DType::bf16);
BENCHMARK_CAPTURE(ConvForward, resnet16_bf16, Shape{128, 28, 28, 16}, Shape{3, 3, 16, 16},
                  DType::bf16);
BENCHMARK_CAPTURE(MaxPool, pool1_f32, Shape{128, 28, 28, 32}, DType::f32);
BENCHMARK_CAPTURE(MaxPool, pool1_bf16, Shape{128, 28, 28, 32}, DType::bf16);
BENCHMARK_CAPTURE(MaxPoolBackward, pool1_f32, Shape{128, 28, 28, 32}, DType::f32);
BENCHMARK_CAPTURE(MaxPoolBackward, pool1_bf16, Shape{128, 28, 28, 32}, DType::bf16);
// The cnn's second pooling (after its 32 -> 64 convolution).
BENCHMARK_CAPTURE(MaxPool, pool2_bf16, Shape{128, 14, 14, 64}, DType::bf16);
BENCHMARK_CAPTURE(MaxPoolBackward, pool2_bf16, Shape{128, 14, 14, 64}, DType::bf16);
// Batch norm with its fused ReLU on resnet's first stage (128 x 28 x 28 x
// 16): memory-bound, so the counter is the bytes of x (and dy) per call.
void BatchNormTrain(benchmark::State& state, DType dtype) {
  const Tensor x = random(Shape{128, 28, 28, 16}, dtype);
  const Tensor gamma = random(Shape{16}, DType::f32), beta = random(Shape{16}, DType::f32);
  Tensor running_mean = Tensor::zeros(Shape{16}), running_var = Tensor::full(Shape{16}, 1.0f);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        kernels::batch_norm_train(x, gamma, beta, running_mean, running_var, 0.1f, 1e-5f, true));
  }
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(x.nbytes()),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void BatchNormBackward(benchmark::State& state, DType dtype) {
  const Tensor x = random(Shape{128, 28, 28, 16}, dtype), dy = random(x.shape(), dtype);
  const Tensor gamma = random(Shape{16}, DType::f32), beta = random(Shape{16}, DType::f32);
  Tensor running_mean = Tensor::zeros(Shape{16}), running_var = Tensor::full(Shape{16}, 1.0f);
  const kernels::BatchNormResult r =
      kernels::batch_norm_train(x, gamma, beta, running_mean, running_var, 0.1f, 1e-5f, true);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        kernels::batch_norm_backward(dy, x, r.mean, r.variance, gamma, 1e-5f, r.relu_mask));
  }
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(x.nbytes()),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// Layer norm over gpt's residual stream (16,384 tokens x 256), forward and
// backward: the counter is the bytes of x per call.
void LayerNorm(benchmark::State& state, DType dtype, bool backward) {
  const Tensor x = random(Shape{16384, 256}, dtype), dy = random(x.shape(), dtype);
  const Tensor gamma = random(Shape{256}, DType::f32), beta = random(Shape{256}, DType::f32);
  const kernels::NormResult r = kernels::layer_norm(x, gamma, beta, 1e-5f);
  for (auto _ : state) {
    if (backward) {
      benchmark::DoNotOptimize(kernels::layer_norm_backward(dy, x, r.mean, r.rstd, gamma));
    } else {
      benchmark::DoNotOptimize(kernels::layer_norm(x, gamma, beta, 1e-5f));
    }
  }
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(x.nbytes()),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(LayerNorm, gpt_f32, DType::f32, false);
BENCHMARK_CAPTURE(LayerNorm, gpt_bf16, DType::bf16, false);
BENCHMARK_CAPTURE(LayerNorm, gpt_backward_f32, DType::f32, true);
BENCHMARK_CAPTURE(LayerNorm, gpt_backward_bf16, DType::bf16, true);

// GELU over gpt's MLP hidden layer (16,384 tokens x 1,024): oneDNN's
// eltwise took 14-26 ms per call here, 12% of gpt's bf16 step.
void Gelu(benchmark::State& state, kernels::Activation form, DType dtype) {
  const Tensor x = random(Shape{16384, 1024}, dtype, 4.0f);
  for (auto _ : state) benchmark::DoNotOptimize(kernels::activate(form, x));
  state.counters["elements/s"] = benchmark::Counter(static_cast<double>(x.numel()),
                                                    benchmark::Counter::kIsIterationInvariantRate);
}

void GeluBackward(benchmark::State& state, kernels::Activation form, DType dtype) {
  const Tensor x = random(Shape{16384, 1024}, dtype, 4.0f);
  const Tensor dy = random(x.shape(), dtype);
  for (auto _ : state) benchmark::DoNotOptimize(kernels::activation_backward(form, dy, x));
  state.counters["elements/s"] = benchmark::Counter(static_cast<double>(x.numel()),
                                                    benchmark::Counter::kIsIterationInvariantRate);
}

// bf16 GELU computed element by element, beside the lookups the rows
// above take where the CPU has AVX-512 (the same bits).
void GeluComputed(benchmark::State& state, kernels::Activation form, bool backward) {
  const Tensor x = random(Shape{16384, 1024}, DType::bf16, 4.0f);
  const Tensor dy = random(x.shape(), DType::bf16);
  if (!kernels::detail::gelu_avx512_supported(x)) {
    state.SkipWithError("no AVX-512 on this CPU");
    return;
  }
  using kernels::detail::Bf16Path;
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        backward ? kernels::detail::gelu_backward_avx512(form, dy, x, Bf16Path::computed)
                 : kernels::detail::gelu_avx512(form, x, Bf16Path::computed));
  }
  state.counters["elements/s"] = benchmark::Counter(static_cast<double>(x.numel()),
                                                    benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK_CAPTURE(GeluComputed, tanh_bf16, kernels::Activation::gelu_tanh, false);
BENCHMARK_CAPTURE(GeluComputed, tanh_backward_bf16, kernels::Activation::gelu_tanh, true);
BENCHMARK_CAPTURE(BatchNormTrain, resnet16_f32, DType::f32);
BENCHMARK_CAPTURE(BatchNormTrain, resnet16_bf16, DType::bf16);
BENCHMARK_CAPTURE(BatchNormBackward, resnet16_f32, DType::f32);
BENCHMARK_CAPTURE(BatchNormBackward, resnet16_bf16, DType::bf16);
BENCHMARK_CAPTURE(Gelu, tanh_f32, kernels::Activation::gelu_tanh, DType::f32);
BENCHMARK_CAPTURE(Gelu, tanh_bf16, kernels::Activation::gelu_tanh, DType::bf16);
BENCHMARK_CAPTURE(Gelu, erf_f32, kernels::Activation::gelu, DType::f32);
BENCHMARK_CAPTURE(Gelu, erf_bf16, kernels::Activation::gelu, DType::bf16);
BENCHMARK_CAPTURE(GeluBackward, tanh_f32, kernels::Activation::gelu_tanh, DType::f32);
BENCHMARK_CAPTURE(GeluBackward, tanh_bf16, kernels::Activation::gelu_tanh, DType::bf16);
BENCHMARK_CAPTURE(GeluBackward, erf_f32, kernels::Activation::gelu, DType::f32);
BENCHMARK_CAPTURE(GeluBackward, erf_bf16, kernels::Activation::gelu, DType::bf16);

// A bias gradient: gpt's MLP hidden layer (16,384 tokens x 1,024) summed
// over its rows.
void BiasGradient(benchmark::State& state, DType dtype) {
  const Tensor x = random(Shape{16384, 1024}, dtype);
  for (auto _ : state) benchmark::DoNotOptimize(kernels::sum_to_shape(x, Shape{1024}));
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(x.nbytes()),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(BiasGradient, gpt_f32, DType::f32);
BENCHMARK_CAPTURE(BiasGradient, gpt_bf16, DType::bf16);

// An f32 tensor cast to bf16: the size of the cnn's first convolution's
// output (128 x 28 x 28 x 32), which its bf16 forward converts row by row.
void CastToBf16(benchmark::State& state) {
  const Tensor x = random(Shape{128, 28, 28, 32}, DType::f32);
  for (auto _ : state) benchmark::DoNotOptimize(x.to(DType::bf16));
  state.counters["values/s"] = benchmark::Counter(static_cast<double>(x.numel()),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(CastToBf16);

// A residual add, alone and with the ReLU after it: resnet's first stage
// (128 x 28 x 28 x 16).
void ResidualAdd(benchmark::State& state, DType dtype, bool relu) {
  const Tensor x = random(Shape{128, 28, 28, 16}, dtype), y = random(x.shape(), dtype);
  for (auto _ : state)
    benchmark::DoNotOptimize(relu ? kernels::add_relu(x, y) : kernels::add(x, y));
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(3 * x.nbytes()),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(ResidualAdd, resnet16_f32, DType::f32, false);
BENCHMARK_CAPTURE(ResidualAdd, resnet16_bf16, DType::bf16, false);
BENCHMARK_CAPTURE(ResidualAdd, resnet16_relu_f32, DType::f32, true);
BENCHMARK_CAPTURE(ResidualAdd, resnet16_relu_bf16, DType::bf16, true);

// gpt's causal self-attention layer (128 sequences of 128 tokens, 8 heads
// of 32) read from its fused QKV projection: forward, and backward.
void AttentionInterleaved(benchmark::State& state, DType dtype, bool backward) {
  const Tensor qkv = random(Shape{128, 128, 3, 8, 32}, dtype);
  const kernels::AttentionResult r = kernels::attention_interleaved(qkv, {});
  const Tensor dout = random(r.out.shape(), dtype);
  for (auto _ : state) {
    if (backward) {
      benchmark::DoNotOptimize(
          kernels::attention_interleaved_backward(dout, qkv, r.out, r.lse, {}));
    } else {
      benchmark::DoNotOptimize(kernels::attention_interleaved(qkv, {}));
    }
  }
  // The products' multiply-adds on the causal half, as the step counts them.
  const double products = backward ? 4.0 : 2.0;
  state.counters["GFLOP/s"] = benchmark::Counter(products * 2.0 * 128 * 8 * 128 * 128 * 32 / 2,
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK_CAPTURE(AttentionInterleaved, gpt_f32, DType::f32, false);
BENCHMARK_CAPTURE(AttentionInterleaved, gpt_bf16, DType::bf16, false);
BENCHMARK_CAPTURE(AttentionInterleaved, gpt_backward_f32, DType::f32, true);
BENCHMARK_CAPTURE(AttentionInterleaved, gpt_backward_bf16, DType::bf16, true);

// Causal attention over separate q, k, v at a long context (1 sequence of
// 1,024 tokens, 8 heads of 64): each head's scores are 4 MiB, more than a
// group's scratch holds. Forward and backward together.
void AttentionLong(benchmark::State& state, DType dtype) {
  const Shape heads{1, 8, 1024, 64};
  const Tensor q = random(heads, dtype), k = random(heads, dtype), v = random(heads, dtype);
  const Tensor dout = random(heads, dtype);
  for (auto _ : state) {
    const kernels::AttentionResult r = kernels::attention(q, k, v, {});
    benchmark::DoNotOptimize(kernels::attention_backward(dout, q, k, v, r.out, r.lse, {}));
  }
  // The causal half of the six products a step counts: the forward's two
  // and the backward's four (the backward's recompute of the scores is not
  // counted, as the step does not count it).
  state.counters["GFLOP/s"] = benchmark::Counter(6 * 2.0 * 8 * 1024 * 1024 * 64 / 2,
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK_CAPTURE(AttentionLong, t1024_f32, DType::f32);
BENCHMARK_CAPTURE(AttentionLong, t1024_bf16, DType::bf16);

// One of attention's products over a group of 8 of gpt's heads (128
// positions of 32) in bf16, the way attention calls it: with its causal
// part (the masked triangle skipped where the kernel can), or whole. The
// rate counts the whole product's multiply-adds either way, so rows
// compare as times.
void AttentionProduct(benchmark::State& state, kernels::detail::CausalPart part, bool causal) {
  using kernels::detail::CausalPart;
  const bool scores = part == CausalPart::out_lower;
  const int64_t heads = 8, T = 128, D = 32;
  const Tensor a = random(scores ? Shape{heads, T, D} : Shape{heads, T, T}, DType::bf16);
  const Tensor b = random(Shape{heads, T, D}, DType::bf16);
  kernels::MatmulOptions options{.out_dtype = scores ? DType::f32 : DType::bf16};
  if (scores) options.transpose_b = true;
  if (part == CausalPart::a_upper) options.transpose_a = true;
  Tensor out = Tensor::empty(Shape{heads, T, scores ? T : D}, options.out_dtype);
  for (auto _ : state) {
    if (causal) {
      kernels::detail::causal_batched_matmul(a, b, out, options, part);
    } else {
      kernels::batched_matmul_into(a, b, out, options);
    }
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * heads * T * T * D, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}
BENCHMARK_CAPTURE(AttentionProduct, scores_causal, kernels::detail::CausalPart::out_lower, true);
BENCHMARK_CAPTURE(AttentionProduct, scores_whole, kernels::detail::CausalPart::out_lower, false);
BENCHMARK_CAPTURE(AttentionProduct, pv_causal, kernels::detail::CausalPart::a_lower, true);
BENCHMARK_CAPTURE(AttentionProduct, pv_whole, kernels::detail::CausalPart::a_lower, false);
BENCHMARK_CAPTURE(AttentionProduct, ptdout_causal, kernels::detail::CausalPart::a_upper, true);
BENCHMARK_CAPTURE(AttentionProduct, ptdout_whole, kernels::detail::CausalPart::a_upper, false);

// Dtype conversion of a cnn conv1 activation (3.2M elements): the cost that
// mixed precision adds around kernels.
void Convert(benchmark::State& state, DType from, DType to) {
  const Tensor x = random(Shape{128, 28, 28, 32}, from);
  for (auto _ : state) benchmark::DoNotOptimize(x.to(to));
  state.counters["elements/s"] = benchmark::Counter(static_cast<double>(x.numel()),
                                                    benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(Convert, f32_to_bf16, DType::f32, DType::bf16);
BENCHMARK_CAPTURE(Convert, bf16_to_f32, DType::bf16, DType::f32);
BENCHMARK_CAPTURE(Convert, f32_to_f16, DType::f32, DType::f16);
BENCHMARK_CAPTURE(Convert, f16_to_f32, DType::f16, DType::f32);

BENCHMARK_MAIN();
