// The CUDA backend against the CPU kernels: every CUDA kernel on the same
// inputs as its CPU counterpart (f32 to 1e-5 relative with TF32 off, bf16
// and f16 to their rounding), tensor copies and conversions between host
// and device, and the errors a missing device or kernel gives. Without a
// GPU, or in a build without CUDA, the device tests are reported as
// skipped, naming why; the error tests run everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/gradcheck.h"
#include "tandem/base/error.h"
#include "tandem/config.h"
#include "tandem/kernels/activation.h"
#include "tandem/kernels/elementwise.h"
#include "tandem/kernels/embedding.h"
#include "tandem/kernels/loss.h"
#include "tandem/kernels/matmul.h"
#include "tandem/kernels/normalization.h"
#include "tandem/kernels/reduce.h"
#include "tandem/kernels/softmax.h"
#include "tandem/tensor/tensor.h"

namespace tandem {
namespace {

using kernels::Activation;
using testing::random_tensor;

const Device kGpu{DeviceKind::cuda, 0};

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (TANDEM_HAVE_CUDA == 0) GTEST_SKIP() << "GPU test not run: this build has no CUDA backend";
    if (cuda_device_count() == 0) GTEST_SKIP() << "GPU test not run: no CUDA device on this machine";
    kernels::set_matmul_allow_tf32(false);
  }
  void TearDown() override { kernels::set_matmul_allow_tf32(true); }
};

// |gpu - cpu| <= tol * max(1, |cpu|) elementwise, naming the first miss.
void expect_match(const Tensor& gpu, const Tensor& cpu, double tol, const std::string& what) {
  ASSERT_EQ(gpu.device(), kGpu) << what;
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  const std::vector<float> g = gpu.to_floats(), c = cpu.to_floats();
  for (size_t i = 0; i < g.size(); ++i) {
    const double scale = std::max(1.0, std::abs(static_cast<double>(c[i])));
    ASSERT_LE(std::abs(static_cast<double>(g[i]) - c[i]), tol * scale)
        << what << ": element " << i << " is " << g[i] << " on the GPU and " << c[i] << " on the CPU";
  }
}

double tolerance(DType dtype) {
  return dtype == DType::f32 ? 1e-5 : (dtype == DType::bf16 ? 1.6e-2 : 2e-3);
}

Tensor random_of(const Shape& shape, DType dtype, uint64_t seed, float low = -2.0f,
                 float high = 2.0f) {
  return random_tensor(shape, low, high, seed).to(dtype);
}

const std::vector<DType> kFloatTypes = {DType::f32, DType::bf16, DType::f16};

TEST_F(Gpu, TensorsCopyAndConvertBetweenHostAndDevice) {
  const Tensor host = random_tensor(Shape{3, 1000, 7}, -3.0f, 3.0f, 1);
  const Tensor dev = host.to(kGpu);
  EXPECT_EQ(dev.to_floats(), host.to_floats());
  EXPECT_EQ(dev.clone().to_floats(), host.to_floats());
  for (DType dtype : {DType::bf16, DType::f16, DType::i32, DType::u8}) {
    EXPECT_EQ(dev.to(dtype).to_floats(), host.to(dtype).to_floats()) << dtype_name(dtype);
    Tensor back = Tensor::empty(host.shape(), DType::f32, kGpu);
    back.copy_from(host.to(dtype));  // across devices and converted
    EXPECT_EQ(back.to_floats(), host.to(dtype).to(DType::f32).to_floats()) << dtype_name(dtype);
  }
  Tensor filled = Tensor::full(Shape{5, 3}, 1.5f, DType::bf16, kGpu);
  EXPECT_EQ(filled.to_floats(), std::vector<float>(15, 1.5f));
  filled.zero();
  EXPECT_EQ(filled.to_floats(), std::vector<float>(15, 0.0f));
  EXPECT_EQ(Tensor::from_ints(Shape{3}, std::vector<int32_t>{4, -1, 9}, kGpu).to_ints(),
            (std::vector<int32_t>{4, -1, 9}));
  EXPECT_FLOAT_EQ(dev.slice(2, 3).reshape(Shape{7000}).to_floats()[5], host.to_floats()[14005]);
}

TEST_F(Gpu, AllocatorAccountsDeviceMemoryByCategory) {
  Allocator& a = allocator_for(kGpu);
  const int64_t before = a.stats().current(MemoryCategory::parameters);
  {
    Tensor t = Tensor::empty(Shape{1 << 20}, DType::f32, kGpu, MemoryCategory::parameters);
    EXPECT_EQ(a.stats().current(MemoryCategory::parameters), before + (4 << 20));
  }
  EXPECT_EQ(a.stats().current(MemoryCategory::parameters), before);
}

TEST_F(Gpu, MatmulMatchesTheCpu) {
  struct Case {
    int64_t M, K, N;
    bool ta, tb, bias;
    Activation act;
  };
  const std::vector<Case> cases = {{1, 1, 1, false, false, false, Activation::none},
                                   {17, 33, 9, false, false, true, Activation::relu},
                                   {64, 128, 256, true, false, true, Activation::gelu},
                                   {31, 64, 48, false, true, false, Activation::gelu_tanh},
                                   {128, 77, 5, true, true, true, Activation::silu}};
  uint64_t seed = 10;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const Case& c : cases) {
      const Tensor a = random_of(c.ta ? Shape{c.K, c.M} : Shape{c.M, c.K}, dtype, ++seed);
      const Tensor b = random_of(c.tb ? Shape{c.N, c.K} : Shape{c.K, c.N}, dtype, ++seed);
      const Tensor bias = c.bias ? random_tensor(Shape{c.N}, -1.0f, 1.0f, ++seed) : Tensor();
      for (DType out : {DType::f32, DType::bf16}) {
        const kernels::MatmulOptions o{c.ta, c.tb, c.act, out};
        const Tensor cpu = kernels::matmul(a, b, bias, o);
        const Tensor gpu = kernels::matmul(a.to(kGpu), b.to(kGpu),
                                           bias.defined() ? bias.to(kGpu) : Tensor(), o);
        // Sums of K products: the f32 tolerance grows with K's rounding.
        const double tol = out == DType::bf16 || dtype == DType::bf16 ? 2e-2 : 1e-5 * std::sqrt(c.K);
        expect_match(gpu, cpu, tol,
                     "matmul " + std::string(dtype_name(dtype)) + " -> " + std::string(dtype_name(out)) +
                         " M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) +
                         " N=" + std::to_string(c.N));
      }
    }
  }
}

TEST_F(Gpu, BatchedMatmulMatchesTheCpuWithSharedAndPerBatchB) {
  uint64_t seed = 40;
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor a = random_of(Shape{2, 3, 16, 24}, dtype, ++seed);
    const Tensor b = random_of(Shape{2, 3, 24, 8}, dtype, ++seed);
    const Tensor shared = random_of(Shape{24, 8}, dtype, ++seed);
    const Tensor bt = random_of(Shape{2, 3, 16, 24}, dtype, ++seed);
    const double tol = dtype == DType::f32 ? 1e-4 : 2e-2;
    expect_match(kernels::batched_matmul(a.to(kGpu), b.to(kGpu)), kernels::batched_matmul(a, b),
                 tol, "batched");
    expect_match(kernels::batched_matmul(a.to(kGpu), shared.to(kGpu)),
                 kernels::batched_matmul(a, shared), tol, "batched, shared b");
    const kernels::MatmulOptions qk{.transpose_b = true};
    expect_match(kernels::batched_matmul(a.to(kGpu), bt.to(kGpu), qk),
                 kernels::batched_matmul(a, bt, qk), tol, "batched, b transposed");
  }
}

TEST_F(Gpu, PointwiseOpsMatchTheCpu) {
  uint64_t seed = 60;
  for (DType dtype : kFloatTypes) {
    const double tol = tolerance(dtype);
    const Tensor a = random_of(Shape{7, 5, 33}, dtype, ++seed);
    const Tensor same = random_of(Shape{7, 5, 33}, dtype, ++seed);
    const Tensor row = random_of(Shape{33}, dtype, ++seed);
    const Tensor one = random_of(Shape{1}, dtype, ++seed);
    for (const Tensor* b : {&same, &row, &one}) {
      expect_match(kernels::add(a.to(kGpu), b->to(kGpu)), kernels::add(a, *b), tol, "add");
      expect_match(kernels::mul(a.to(kGpu), b->to(kGpu)), kernels::mul(a, *b), tol, "mul");
    }
    expect_match(kernels::scale(a.to(kGpu), -0.75f), kernels::scale(a, -0.75f), tol, "scale");
    Tensor dst_cpu = random_tensor(Shape{7, 5, 33}, -1.0f, 1.0f, ++seed);
    Tensor dst_gpu = dst_cpu.to(kGpu);
    kernels::add_into(dst_cpu, a, 0.5f);
    kernels::add_into(dst_gpu, a.to(kGpu), 0.5f);
    expect_match(dst_gpu, dst_cpu, 1e-5, "add_into f32 += " + std::string(dtype_name(dtype)));
    for (Activation act : {Activation::relu, Activation::gelu, Activation::gelu_tanh,
                           Activation::silu}) {
      const std::string name = std::string(kernels::activation_name(act)) + " " + std::string(dtype_name(dtype));
      const Tensor y = kernels::activate(act, a);
      expect_match(kernels::activate(act, a.to(kGpu)), y, tol, name);
      const Tensor saved = act == Activation::relu ? y : a;
      expect_match(kernels::activation_backward(act, same.to(kGpu), saved.to(kGpu)),
                   kernels::activation_backward(act, same, saved), tol, name + " backward");
    }
  }
}

TEST_F(Gpu, ReductionsMatchTheCpuAndRepeatExactly) {
  uint64_t seed = 80;
  for (int64_t n : {0, 1, 255, 257, 100003}) {
    for (DType dtype : kFloatTypes) {
      const Tensor x = random_of(Shape{n}, dtype, ++seed);
      const Tensor g = x.to(kGpu);
      expect_match(kernels::sum(g), kernels::sum(x), 1e-5, "sum");
      if (n > 0) expect_match(kernels::mean(g), kernels::mean(x), 1e-5, "mean");
      EXPECT_NEAR(kernels::squared_norm(g), kernels::squared_norm(x),
                  1e-9 * std::max(1.0, kernels::squared_norm(x)));
      EXPECT_EQ(kernels::sum(g).item(), kernels::sum(g).item()) << "not deterministic";
    }
  }
  EXPECT_TRUE(std::isnan(kernels::mean(Tensor::empty(Shape{0}, DType::f32, kGpu)).item()));
  const Tensor x = random_tensor(Shape{6, 4, 17}, -1.0f, 1.0f, 99);
  expect_match(kernels::sum_to_shape(x.to(kGpu), Shape{4, 17}), kernels::sum_to_shape(x, Shape{4, 17}),
               1e-5, "sum_to_shape");
  expect_match(kernels::sum_to_shape(x.to(kGpu), Shape{17}), kernels::sum_to_shape(x, Shape{17}),
               1e-5, "sum_to_shape to a row");
}

TEST_F(Gpu, SoftmaxAndCrossEntropyMatchTheCpu) {
  uint64_t seed = 100;
  for (DType dtype : kFloatTypes) {
    const double tol = tolerance(dtype);
    for (int64_t k : {1, 10, 1000}) {
      const Tensor x = random_of(Shape{3, 5, k}, dtype, ++seed, -8.0f, 8.0f);
      const Tensor dy = random_of(Shape{3, 5, k}, dtype, ++seed);
      const Tensor y = kernels::softmax(x), ly = kernels::log_softmax(x);
      expect_match(kernels::softmax(x.to(kGpu)), y, tol, "softmax");
      expect_match(kernels::log_softmax(x.to(kGpu)), ly, tol, "log_softmax");
      expect_match(kernels::softmax_backward(dy.to(kGpu), y.to(kGpu)),
                   kernels::softmax_backward(dy, y), tol, "softmax_backward");
      expect_match(kernels::log_softmax_backward(dy.to(kGpu), ly.to(kGpu)),
                   kernels::log_softmax_backward(dy, ly), tol, "log_softmax_backward");
    }
    const Tensor logits = random_of(Shape{37, 11}, dtype, ++seed, -5.0f, 5.0f);
    std::vector<int32_t> l(37);
    for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<int32_t>((i * 7) % 11);
    const Tensor labels = Tensor::from_ints(Shape{37}, l);
    const auto cpu = kernels::softmax_cross_entropy(logits, labels, 64.0);
    const auto gpu = kernels::softmax_cross_entropy(logits.to(kGpu), labels.to(kGpu), 64.0);
    expect_match(gpu.loss, cpu.loss, 1e-5, "cross-entropy loss");
    expect_match(gpu.probabilities, cpu.probabilities, 1e-5, "cross-entropy probabilities");
    for (DType out : kFloatTypes) {
      expect_match(kernels::softmax_cross_entropy_backward(gpu.probabilities, labels.to(kGpu),
                                                           2.0f, 64.0, out),
                   kernels::softmax_cross_entropy_backward(cpu.probabilities, labels, 2.0f, 64.0,
                                                           out),
                   tolerance(out), "cross-entropy backward");
    }
    EXPECT_EQ(kernels::count_correct(logits.to(kGpu), labels.to(kGpu)),
              kernels::count_correct(logits, labels));
  }
  const Tensor bad = Tensor::from_ints(Shape{2}, std::vector<int32_t>{0, 11}, kGpu);
  EXPECT_THROW(kernels::softmax_cross_entropy(Tensor::zeros(Shape{2, 11}, DType::f32, kGpu), bad),
               InvalidArgument);
}

TEST_F(Gpu, EmbeddingMatchesTheCpuAndRefusesBadIndices) {
  for (DType dtype : kFloatTypes) {
    const Tensor table = random_of(Shape{50, 24}, dtype, 120);
    std::vector<int32_t> idx(4 * 9);
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>((i * 13) % 50 % 7);
    const Tensor indices = Tensor::from_ints(Shape{4, 9}, idx);
    expect_match(kernels::embedding(table.to(kGpu), indices.to(kGpu)),
                 kernels::embedding(table, indices), 0.0, "embedding");
    const Tensor dy = random_of(Shape{4, 9, 24}, dtype, 121);
    expect_match(kernels::embedding_backward(dy.to(kGpu), indices.to(kGpu), 50),
                 kernels::embedding_backward(dy, indices, 50), 1e-6, "embedding_backward");
  }
  const Tensor bad = Tensor::from_ints(Shape{1}, std::vector<int32_t>{50}, kGpu);
  EXPECT_THROW(kernels::embedding(Tensor::zeros(Shape{50, 4}, DType::f32, kGpu), bad),
               InvalidArgument);
}

TEST_F(Gpu, MixedDevicesAndKernelsWithoutACudaVersionAreRefused) {
  const Tensor g = Tensor::zeros(Shape{4, 8}, DType::f32, kGpu);
  const Tensor c = Tensor::zeros(Shape{4, 8});
  EXPECT_THROW(kernels::add(g, c), InvalidArgument);
  try {
    kernels::layer_norm(g, Tensor::zeros(Shape{8}, DType::f32, kGpu),
                        Tensor::zeros(Shape{8}, DType::f32, kGpu), 1e-5f);
    FAIL() << "layer_norm on a GPU tensor should be refused";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("no kernel for that device"), std::string::npos)
        << e.what();
  }
}

// Runs on every machine: without a GPU (or without CUDA in the build) a
// tensor on cuda:0 is an error that says why, not a crash.
TEST(GpuAbsent, ACudaTensorWithoutADeviceIsAClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  try {
    Tensor::empty(Shape{4}, DType::f32, kGpu);
    FAIL() << "a tensor on cuda:0 without a GPU should be refused";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_TRUE(message.find(TANDEM_HAVE_CUDA ? "does not exist" : "no CUDA backend") !=
                std::string::npos)
        << message;
  }
}

}  // namespace
}  // namespace tandem
