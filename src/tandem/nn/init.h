#pragma once
// Parameter initialisers. The layers use PyTorch's defaults: Linear and Conv2d
// weights kaiming_uniform(a = sqrt(5)), which is U(-1/sqrt(fan_in),
// 1/sqrt(fan_in)), biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)), norms' scale 1
// and shift 0, Embedding N(0, 1). Tensors must be f32.

#include <cstdint>

#include "tandem/base/random.h"
#include "tandem/tensor/tensor.h"

namespace tandem::nn::init {

void uniform(Tensor& tensor, float low, float high, Generator& generator);
void normal(Tensor& tensor, float mean, float stddev, Generator& generator);
// U(-bound, bound) with bound = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)).
void kaiming_uniform(Tensor& tensor, int64_t fan_in, float a, Generator& generator);
// U(-bound, bound) with bound = sqrt(6 / (fan_in + fan_out)).
void xavier_uniform(Tensor& tensor, int64_t fan_in, int64_t fan_out, Generator& generator);

}  // namespace tandem::nn::init
