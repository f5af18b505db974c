#include <gtest/gtest.h>

#include <cmath>

#include "support/ranks.h"
#include "tandem/base/error.h"
#include "tandem/base/random.h"
#include "tandem/comm/bucketer.h"
#include "tandem/comm/compression.h"
#include "tandem/comm/inprocess.h"
#include "tandem/tensor/convert.h"

namespace tandem::comm {
namespace {

TEST(Bucketer, FillsBucketsInOrderUntilEachReachesItsSizeAsDdpDoes) {
  // 100 KiB tensors: the 160 KiB first bucket takes 2 (the second crosses
  // its size), each 400 KiB bucket 4 (the fourth reaches it).
  std::vector<TensorLayout> layouts(10, TensorLayout{Shape{25600}, DType::f32});
  Bucketer b(layouts, {.bucket_bytes = 400 << 10, .first_bucket_bytes = 160 << 10});
  ASSERT_EQ(b.bucket_count(), 3u);
  EXPECT_EQ(b.tensors_in(0), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(b.tensors_in(1), (std::vector<size_t>{2, 3, 4, 5}));
  EXPECT_EQ(b.tensors_in(2), (std::vector<size_t>{6, 7, 8, 9}));
  EXPECT_EQ(b.bucket_of(7), 2u);
  EXPECT_EQ(b.offset_of(7), 25600);
  EXPECT_EQ(b.bucket(1).numel(), 4 * 25600);
  EXPECT_EQ(b.bucket(1).category(), MemoryCategory::gradients);
}

// The mlp's gradients in backward order: two small ones, then a 1 MiB
// weight, then the biggest. The weight joins the first bucket, whose
// all-reduce then starts when backward has produced it and overlaps the
// rest of backward; a rule that kept buckets under their size would have
// left the first bucket with the small ones and sent everything else in
// one bucket after backward.
TEST(Bucketer, ALargeGradientJoinsTheFirstBucketThatHasRoom) {
  const std::vector<TensorLayout> layouts = {{Shape{10}, DType::f32},
                                             {Shape{512, 10}, DType::f32},
                                             {Shape{512, 512}, DType::f32},
                                             {Shape{784, 512}, DType::f32}};
  Bucketer b(layouts, {.bucket_bytes = 25 << 20, .first_bucket_bytes = 1 << 20});
  ASSERT_EQ(b.bucket_count(), 2u);
  EXPECT_EQ(b.tensors_in(0), (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(b.tensors_in(1), (std::vector<size_t>{3}));
}

TEST(Bucketer, ViewsShareTheBucketAndKeepShapes) {
  std::vector<TensorLayout> layouts = {{Shape{3, 4}, DType::f32},
                                       {Shape{5}, DType::f32},
                                       {Shape{2, 2}, DType::bf16},
                                       {Shape{1000000}, DType::f32},
                                       {Shape{7}, DType::f32}};
  Bucketer b(layouts, {.bucket_bytes = 1 << 20, .first_bucket_bytes = 1 << 10});
  // A dtype change, and a full bucket, each open a bucket.
  EXPECT_EQ(b.bucket_of(0), b.bucket_of(1));
  EXPECT_NE(b.bucket_of(2), b.bucket_of(1));
  EXPECT_NE(b.bucket_of(3), b.bucket_of(2));
  EXPECT_NE(b.bucket_of(4), b.bucket_of(3));
  Tensor v0 = b.view(0), v1 = b.view(1);
  EXPECT_EQ(v0.shape(), (Shape{3, 4}));
  EXPECT_EQ(b.view(2).dtype(), DType::bf16);
  v1.fill(2.0f);
  v0.fill(1.0f);
  const auto flat = b.bucket(b.bucket_of(0)).to_floats();
  EXPECT_EQ(flat[11], 1.0f);
  EXPECT_EQ(flat[12], 2.0f);
  EXPECT_TRUE(v0.shares_storage(b.bucket(b.bucket_of(0))));
  EXPECT_THROW(Bucketer(layouts, {.bucket_bytes = 0}), InvalidArgument);
}

TEST(Compression, Bf16AndF16WireMatchF32WithinRounding) {
  constexpr int kRanks = 3;
  constexpr int64_t kCount = 10007;
  for (WireDType wire : {WireDType::bf16, WireDType::f16}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
      InProcessGroup group(kRanks);
      std::vector<std::vector<float>> inputs(kRanks), results(kRanks);
      for (int r = 0; r < kRanks; ++r) {
        inputs[r].resize(kCount);
        Generator(static_cast<uint64_t>(r)).normal(inputs[r].data(), kCount, 0.0f, 2.0f);
      }
      testing::run_ranks(kRanks, [&](int r) {
        auto comm = group.communicator(r);
        Tensor buffer = Tensor::from_floats(Shape{kCount}, inputs[r]);
        all_reduce_compressed(*comm, buffer, op, wire);
        results[r] = buffer.to_floats();
      });
      const double eps = wire == WireDType::bf16 ? 1.0 / 128 : 1.0 / 1024;
      for (int64_t i = 0; i < kCount; ++i) {
        double exact = 0, magnitude = 0;
        for (int r = 0; r < kRanks; ++r) {
          exact += inputs[r][i];
          magnitude += std::abs(inputs[r][i]);
        }
        if (op == ReduceOp::mean) {
          exact /= kRanks;
          magnitude /= kRanks;
        }
        for (int r = 0; r < kRanks; ++r) {
          ASSERT_NEAR(results[r][i], exact, eps * (magnitude + std::abs(exact)) + 1e-6)
              << wire_dtype_name(wire) << " " << reduce_op_name(op) << " element " << i;
          ASSERT_EQ(results[r][i], results[0][i]) << "replicas differ";
        }
      }
    }
  }
}

TEST(Compression, F32WireIsPlainAllReduceAndBadArgumentsAreErrors) {
  auto comm = InProcessGroup(1).communicator(0);
  Tensor t = Tensor::full(Shape{4}, 1.5f);
  all_reduce_compressed(*comm, t, ReduceOp::sum, WireDType::f32);
  EXPECT_EQ(t.to_floats()[0], 1.5f);
  EXPECT_THROW(all_reduce_compressed(*comm, Tensor::zeros(Shape{4}, DType::bf16), ReduceOp::sum,
                                     WireDType::bf16),
               InvalidArgument);
  EXPECT_THROW(all_reduce_compressed(*comm, t, ReduceOp::max, WireDType::bf16), InvalidArgument);
  EXPECT_THROW(all_reduce_compressed(*comm, t, ReduceOp::sum, WireDType::bf16,
                                     Tensor::zeros(Shape{3}, DType::bf16)),
               InvalidArgument);
  EXPECT_EQ(parse_wire_dtype("f16"), WireDType::f16);
  EXPECT_THROW(parse_wire_dtype("int8"), InvalidArgument);
}

}  // namespace
}  // namespace tandem::comm
