// Strategies by equivalence with one device: the same global batch gives the
// same parameters whatever the replica count, and replicas stay identical.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "support/equivalence.h"
#include "support/ranks.h"
#include "support/reference.h"
#include "support/test_data.h"
#include "tandem/autograd/functions.h"
#include "tandem/base/cpu_info.h"
#include "tandem/base/error.h"
#include "tandem/comm/inprocess.h"
#include "tandem/data/fashion_mnist.h"
#include "tandem/distribute/reducer.h"
#include "tandem/nn/activation.h"
#include "tandem/nn/conv.h"
#include "tandem/nn/flatten.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/models.h"
#include "tandem/nn/normalization.h"
#include "tandem/tensor/allocator.h"
#include "tandem/train/trainer.h"

namespace tandem {
namespace {

using testing::relative_error;

namespace fs = std::filesystem;

using testing::fashion;

// The first n training examples, reshuffled each epoch.
data::Dataset head(int64_t n) {
  return testing::shuffled({fashion().train.images.slice(0, n), fashion().train.labels.slice(0, n)},
                           5);
}

// A small conv net with synchronised batch norm (the convolution has no bias:
// before batch norm its gradient is zero up to rounding, which Adam would
// amplify into noise).
std::shared_ptr<nn::Module> bn_model(bool synchronized = true) {
  Generator g(21);
  auto m = std::make_shared<nn::Sequential>();
  m->emplace<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = 1, .bias = false}, g)
      .emplace<nn::BatchNorm2d>(4, 1e-5f, 0.1f, synchronized)
      .emplace<nn::ReLU>()
      .emplace<nn::MaxPool2d>(4)
      .emplace<nn::Flatten>()
      .emplace<nn::Linear>(196, 10, nn::LinearOptions{}, g);
  return m;
}

train::ModelFactory factory(const std::string& name) {
  if (name == "bn") return train::custom_model("bn", [] { return bn_model(); });
  return train::custom_model(name, [name] { return nn::make_model(name, {.seed = 3}); });
}

// One epoch; adam at 0.002.
train::TrainConfig config(const std::string& strategy, int devices, const std::string& optimizer) {
  return testing::equivalence_config(strategy, devices, optimizer, 1, 0.002);
}

struct Case {
  std::string model;
  int devices;
  std::string optimizer;
  int64_t examples;  // 48: full batches; 50: a last batch of 2 over more replicas than examples
};

class EquivalenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(EquivalenceTest, MirroredMatchesOneDeviceAndReplicasStayIdentical) {
  const Case c = GetParam();
  const auto data = head(c.examples);
  train::Trainer single(config("one_device", 1, c.optimizer), factory(c.model));
  single.fit(data);
  train::Trainer mirrored(config("mirrored", c.devices, c.optimizer), factory(c.model));
  int steps = 0;
  train::TrainCallbacks callbacks;
  callbacks.on_step = [&](const train::StepInfo&) {
    ++steps;
    const auto reference = mirrored.replica_model(0).named_parameters();
    for (int r = 1; r < c.devices; ++r) {
      const auto other = mirrored.replica_model(r).named_parameters();
      for (size_t i = 0; i < reference.size(); ++i) {
        ASSERT_EQ(reference[i].second.value().to_floats(), other[i].second.value().to_floats())
            << "replica " << r << " differs in " << reference[i].first << " after step " << steps;
      }
    }
  };
  mirrored.fit(data, {}, callbacks);
  EXPECT_EQ(steps, (c.examples + 11) / 12);
  const auto a = single.model().named_parameters();
  const auto b = mirrored.model().named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LT(relative_error(a[i].second.value().to_floats(), b[i].second.value().to_floats()),
              1e-5)
        << a[i].first;
  }
  // Running statistics too (synchronised batch norm keeps them global).
  const auto ba = single.model().named_buffers();
  const auto bb = mirrored.model().named_buffers();
  for (size_t i = 0; i < ba.size(); ++i) {
    EXPECT_LT(relative_error(ba[i].second->to_floats(), bb[i].second->to_floats()), 1e-5)
        << ba[i].first;
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* model : {"mlp", "cnn", "bn"}) {
    for (int devices : {2, 3, 4}) {
      for (const char* optimizer : {"sgd", "adam"}) out.push_back({model, devices, optimizer, 48});
    }
  }
  out.push_back({"mlp", 4, "sgd", 50});
  out.push_back({"bn", 3, "adam", 50});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, EquivalenceTest, ::testing::ValuesIn(cases()),
                         [](const auto& param_info) {
                           const Case& c = param_info.param;
                           return c.model + "_" + std::to_string(c.devices) + "devices_" +
                                  c.optimizer + "_" + std::to_string(c.examples);
                         });

// Unsynchronised batch norm: each replica's running statistics follow its
// own rows during the epoch; before the validation and the checkpoint every
// replica takes replica 0's (the validation blended statistics no saved
// model had, and a resume gave every replica replica 0's).
TEST(Strategy, ReplicasTakeReplicaZerosBuffersBeforeEvaluating) {
  train::Trainer mirrored(config("mirrored", 2, "adam"), train::custom_model("bn-per-replica", [] {
                            return bn_model(/*synchronized=*/false);
                          }));
  const auto buffers = [&](int r) {
    std::vector<std::vector<float>> values;
    for (const auto& [name, t] : mirrored.replica_model(r).named_buffers())
      values.push_back(t->to_floats());
    return values;
  };
  bool drifted = false;
  mirrored.fit(head(48), head(24), {.on_step = [&](const train::StepInfo&) {
                 drifted = drifted || buffers(0) != buffers(1);
               }});
  EXPECT_TRUE(drifted) << "the replicas' rows gave the same statistics";
  EXPECT_EQ(buffers(0), buffers(1));
}

TEST(Reducer, GradientAccumulationCommunicatesOnlyOnTheLastMicroBatch) {
  // Two replicas, two micro-batches each: the result equals one all-reduce of
  // the summed gradients, and the first micro-batch launches nothing.
  comm::InProcessGroup group(2);
  std::vector<std::vector<float>> results(2);
  std::vector<int64_t> launched(2);
  testing::run_ranks(2, [&](int r) {
    auto comm = group.communicator(r);
    Variable w(Tensor::from_floats(Shape{3}, std::vector<float>{1, 2, 3}), true);
    distribute::Reducer reducer({w}, *comm);
    const Tensor x1 = Tensor::full(Shape{3}, static_cast<float>(r + 1));
    const Tensor x2 = Tensor::full(Shape{3}, 10.0f);
    reducer.prepare(false);
    sum(mul(w, Variable(x1))).backward();
    reducer.finish();
    launched[r] += reducer.last_step().buckets_launched;
    reducer.prepare(true);
    sum(mul(w, Variable(x2))).backward();
    reducer.finish();
    launched[r] += reducer.last_step().buckets_launched;
    results[r] = w.grad().to_floats();
  });
  // Local sums: rank 0: 1 + 10, rank 1: 2 + 10; reduced: 23.
  EXPECT_EQ(results[0], std::vector<float>(3, 23.0f));
  EXPECT_EQ(results[1], results[0]);
  EXPECT_EQ(launched[0], 1);  // one bucket, launched once
}

TEST(Reducer, UnusedParametersGetZeroGradientsOnEveryReplica) {
  comm::InProcessGroup group(2);
  testing::run_ranks(2, [&](int r) {
    auto comm = group.communicator(r);
    Variable used(Tensor::full(Shape{2}, 1.0f), true), unused(Tensor::full(Shape{2}, 1.0f), true);
    // Tiny buckets: one per parameter, so the unused one's bucket waits for finish().
    distribute::Reducer reducer({used, unused}, *comm,
                                {.bucket_bytes = 8, .first_bucket_bytes = 8});
    EXPECT_EQ(reducer.bucket_count(), 2u);
    reducer.prepare();
    sum(scale(used, static_cast<float>(r + 1))).backward();
    reducer.finish();
    EXPECT_EQ(used.grad().to_floats(), std::vector<float>(2, 3.0f));
    EXPECT_TRUE(unused.has_grad());
    EXPECT_EQ(unused.grad().to_floats(), std::vector<float>(2, 0.0f));
  });
}

TEST(Strategy, EachReplicasMemoryIsAccountedToItsDevice) {
  auto bytes = [](int device, MemoryCategory c) {
    return allocator_for(cpu_device(device)).stats().current(c);
  };
  const int64_t params_before = bytes(1, MemoryCategory::parameters);
  const int64_t grads_before = bytes(1, MemoryCategory::gradients);
  const int64_t state_before = bytes(1, MemoryCategory::optimizer_state);
  train::Trainer mirrored(config("mirrored", 2, "sgd"), factory("mlp"));
  int64_t parameter_bytes = 0;
  for (const auto& p : mirrored.replica_model(1).parameters()) {
    EXPECT_EQ(p.value().device(), cpu_device(1));
    parameter_bytes += p.value().nbytes();
  }
  EXPECT_EQ(mirrored.replica_model(0).parameters()[0].value().device(), cpu_device(0));
  EXPECT_EQ(bytes(1, MemoryCategory::parameters) - params_before, parameter_bytes);
  EXPECT_EQ(bytes(1, MemoryCategory::gradients) - grads_before, parameter_bytes);  // buckets
  // SGD momentum (f32 per parameter) plus the update counters.
  EXPECT_GE(bytes(1, MemoryCategory::optimizer_state) - state_before, parameter_bytes);
  allocator_for(cpu_device(1)).reset_peaks();
  const int64_t activations_before = bytes(1, MemoryCategory::activations);
  mirrored.fit(head(48));
  // Replica 1's forward and backward ran on its device.
  EXPECT_GT(allocator_for(cpu_device(1)).stats().peak(MemoryCategory::activations),
            activations_before);
}

TEST(Strategy, CheckpointFromMirroredResumesOnOneDevice) {
  const auto data = head(48);
  const std::string dir = (fs::path(TANDEM_TEST_TMPDIR) / "mirrored_ckpt").string();
  fs::remove_all(dir);
  auto c = config("mirrored", 2, "sgd");
  c.epochs = 2;
  c.output_dir = dir;
  {
    train::Trainer t(c, factory("mlp"));
    train::TrainCallbacks stop;
    stop.on_step = [&](const train::StepInfo& s) {
      if (s.global_step == 6) t.request_stop();
    };
    EXPECT_TRUE(t.fit(data, {}, stop).interrupted);
  }
  auto resume = config("one_device", 1, "sgd");
  resume.epochs = 2;
  resume.output_dir = dir;
  resume.resume = true;
  train::Trainer continued(resume, factory("mlp"));
  const train::TrainResult r = continued.fit(data);
  EXPECT_EQ(r.resumed_from_step, 6);
  ASSERT_EQ(r.history.size(), 2u);
  auto full = config("one_device", 1, "sgd");
  full.epochs = 2;
  train::Trainer reference(full, factory("mlp"));
  reference.fit(data);
  const auto a = reference.model().named_parameters();
  const auto b = continued.model().named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LT(relative_error(a[i].second.value().to_floats(), b[i].second.value().to_floats()),
              1e-5)
        << a[i].first;
  }
}

TEST(Strategy, BadConfigurationsAreClearErrors) {
  auto error_of = [&](train::TrainConfig c, train::ModelFactory f) {
    try {
      train::Trainer t(c, f);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto too_many = config("mirrored", cpu_info().physical_cores + 1, "sgd");
  too_many.strategy.allow_oversubscription = false;
  EXPECT_NE(error_of(too_many, factory("mlp")).find("physical cores"), std::string::npos);
  auto uneven = config("mirrored", 2, "sgd");
  uneven.batch_size = 13;
  EXPECT_NE(error_of(uneven, factory("mlp")).find("does not divide among 2 replicas"),
            std::string::npos);
  EXPECT_NE(error_of(config("multi_worker", 1, "sgd"), factory("mlp")).find("mpirun"),
            std::string::npos);
  auto calls = std::make_shared<int>(0);
  const train::ModelFactory mixed = train::custom_model(
      "mixed", [calls] { return nn::make_model((*calls)++ == 0 ? "mlp" : "cnn"); });
  EXPECT_NE(error_of(config("mirrored", 2, "sgd"), mixed).find("different models"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem
