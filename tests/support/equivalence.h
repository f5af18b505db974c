#pragma once
// What the equivalence tests share (a strategy trained against one device
// must end with the same parameters): their training configuration and the
// comparison of two trainers' parameters.

#include <string>

#include "tandem/train/trainer.h"

namespace tandem::testing {

// Seed 5, batches of 12, a constant learning rate, sgd (lr 0.05, momentum
// 0.9) or adam, `devices` replicas of one thread each (oversubscription
// allowed: the suite runs on 2 cores).
train::TrainConfig equivalence_config(const std::string& strategy, int devices,
                                      const std::string& optimizer, int epochs = 2,
                                      double adam_learning_rate = 0.003);

// Every parameter of a within `relative` (||a - b|| / ||a||) of b's.
void expect_same_parameters(train::Trainer& a, train::Trainer& b, const std::string& what,
                            double relative = 1e-5);

}  // namespace tandem::testing
