#include "tandem/nn/activation.h"

#include "tandem/autograd/functions.h"

namespace tandem::nn {

Variable ReLU::forward(const Variable& input) {
  return relu(input);
}
Variable GELU::forward(const Variable& input) {
  return gelu(input);
}
Variable GELUTanh::forward(const Variable& input) {
  return gelu_tanh(input);
}
Variable SiLU::forward(const Variable& input) {
  return silu(input);
}

}  // namespace tandem::nn
