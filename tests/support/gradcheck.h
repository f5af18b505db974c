#pragma once
// Finite-difference gradient checks: compares backward() against central
// differences of a scalar projection sum(f(inputs) * R), R fixed random, with
// the projection accumulated in double.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tandem/autograd/variable.h"

namespace tandem::testing {

using VariableFunction = std::function<Variable(const std::vector<Variable>&)>;

struct GradcheckOptions {
  double eps = 1e-2;   // perturbation
  double atol = 2e-3;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 2e-2;
  uint64_t seed = 7;
};

// Checks every element of every input that requires grad; adds a GoogleTest
// failure naming the input and element on mismatch.
void expect_gradients_match(const VariableFunction& f, const std::vector<Variable>& inputs,
                            const GradcheckOptions& options = {});

// An f32 tensor of the shape filled with uniform values in [low, high).
Tensor random_tensor(const Shape& shape, float low, float high, uint64_t seed);
// t's storage as bytes (none for an undefined tensor): results compared
// bit for bit, -0 against +0 and NaN payloads included.
std::vector<uint8_t> storage_bytes(const Tensor& t);
// Values whose magnitude is at least `margin` (away from ReLU's kink) and
// pairwise distinct (no max-pool ties), in [-1, 1].
Tensor distinct_tensor(const Shape& shape, float margin, uint64_t seed);

}  // namespace tandem::testing
