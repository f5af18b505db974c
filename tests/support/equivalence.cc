#include "support/equivalence.h"

#include <gtest/gtest.h>

#include "support/reference.h"

namespace tandem::testing {

train::TrainConfig equivalence_config(const std::string& strategy, int devices,
                                      const std::string& optimizer, int epochs,
                                      double adam_learning_rate) {
  train::TrainConfig c{.epochs = epochs,
                       .batch_size = 12,
                       .engine = {.seed = 5},
                       .schedule = optim::ScheduleKind::constant};
  c.engine.optimizer = optimizer == "sgd"
                           ? optim::OptimizerConfig{.kind = optim::OptimizerKind::sgd,
                                                    .learning_rate = 0.05,
                                                    .momentum = 0.9}
                           : optim::OptimizerConfig{.kind = optim::parse_optimizer(optimizer),
                                                    .learning_rate = adam_learning_rate};
  c.strategy = {.kind = distribute::parse_strategy(strategy),
                .devices = devices,
                .threads_per_device = 1,
                .allow_oversubscription = true};
  return c;
}

void expect_same_parameters(train::Trainer& a, train::Trainer& b, const std::string& what,
                            double relative) {
  const auto pa = a.model().named_parameters();
  const auto pb = b.model().named_parameters();
  ASSERT_EQ(pa.size(), pb.size()) << what;
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_LT(relative_error(pa[i].second.value().to_floats(), pb[i].second.value().to_floats()),
              relative)
        << what << ": " << pa[i].first;
  }
}

}  // namespace tandem::testing
