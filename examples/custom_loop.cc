// A custom training loop on the step engine, without the Trainer: a model,
// data and loss of the program's own, trained data-parallel over 2 mirrored
// devices (tf.distribute's strategy.run, or a PyTorch loop over DDP). The
// engine splits each global batch between the replicas, all-reduces the
// gradients and applies the same update on both. Exits with status 1 unless
// the model learned (CTest runs it).
#include <cmath>
#include <cstdio>
#include <vector>

#include "tandem/tandem.h"

using namespace tandem;

namespace {

// The model: a residual MLP of the program's own, y = f(x) for x in R^2.
class ResidualMlp : public nn::Module {
 public:
  explicit ResidualMlp(uint64_t seed) {
    Generator g(seed);
    const nn::LinearOptions relu{.activation = kernels::Activation::relu};
    in_ = std::make_shared<nn::Linear>(2, 64, relu, g);
    hidden_ = std::make_shared<nn::Linear>(64, 64, relu, g);
    out_ = std::make_shared<nn::Linear>(64, 1, nn::LinearOptions{}, g);
    register_module("in", in_);
    register_module("hidden", hidden_);
    register_module("out", out_);
  }
  Variable forward(const Variable& x) override {
    const Variable h = in_->forward(x);
    return out_->forward(add(h, hidden_->forward(h)));  // (N, 1)
  }
  std::string describe() const override { return "ResidualMlp(2 -> 64 -> 64 -> 1)"; }

 private:
  std::shared_ptr<nn::Linear> in_, hidden_, out_;
};

// The data: n points of the plane and a smooth target, made here.
data::Element make_batch(int64_t n, Generator& g) {
  std::vector<float> x(static_cast<size_t>(2 * n)), y(static_cast<size_t>(n));
  g.uniform(x.data(), 2 * n, -2.0f, 2.0f);
  for (int64_t i = 0; i < n; ++i) y[i] = std::sin(1.5f * x[2 * i]) * std::cos(x[2 * i + 1]);
  return {{"x", Tensor::from_floats(Shape{n, 2}, x)}, {"y", Tensor::from_floats(Shape{n}, y)}};
}

// The loss: per-example squared error written with autograd ops.
Variable per_example_squared_error(const Variable& predictions, const Tensor& targets) {
  const Variable error =
      add(reshape(predictions, targets.shape()), scale(Variable(targets), -1.0f));
  return mul(error, error);  // (N,)
}

}  // namespace

int main() {
  try {
    auto strategy = distribute::make_strategy({.kind = distribute::StrategyKind::mirrored,
                                               .devices = 2,
                                               .threads_per_device = 1,
                                               .allow_oversubscription = true});
    auto engine = strategy->make_engine(
        [] { return std::make_shared<ResidualMlp>(7); },
        {.optimizer = {.kind = optim::OptimizerKind::adam, .learning_rate = 3e-3}});
    const distribute::ForwardFn forward = [](nn::Module& model, const distribute::ReplicaBatch& b) {
      const Variable predictions = model.forward(Variable(b.rows.at("x")));
      return per_example_squared_error(predictions, b.rows.at("y"));
    };
    Generator data(1);
    const data::Element validation = make_batch(1000, data);
    // Mean squared error on the validation points: each replica sums its
    // rows' errors, the sums are added over the replicas exactly.
    const auto validation_error = [&] {
      std::vector<std::vector<double>> sums(2, std::vector<double>(2, 0.0));
      engine->evaluate(validation, [&](nn::Module& model, const distribute::ReplicaBatch& b) {
        const Tensor e =
            per_example_squared_error(model.forward(Variable(b.rows.at("x"))), b.rows.at("y"))
                .value();
        for (float v : e.to_floats()) sums[b.context.local_replica][0] += v;
        sums[b.context.local_replica][1] += static_cast<double>(e.numel());
      });
      const std::vector<double> total = distribute::sum_over_replicas(*strategy, sums);
      return total[0] / total[1];
    };
    const double before = validation_error();
    double loss = 0.0;
    for (int64_t step = 0; step < 400; ++step) {
      loss = engine->step(make_batch(64, data), forward, {.step = step}).loss;
      if (step % 100 == 0) std::printf("step %lld: training loss %.4f\n", (long long)step, loss);
    }
    const double after = validation_error();
    std::printf("validation mean squared error: %.4f before, %.4f after 400 steps on %d replicas\n",
                before, after, strategy->global_replicas());
    if (!(after < 0.2 * before)) {
      std::fprintf(stderr, "error: the model did not learn\n");
      return 1;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
