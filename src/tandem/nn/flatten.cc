#include "tandem/nn/flatten.h"

#include "tandem/autograd/functions.h"

namespace tandem::nn {

Variable Flatten::forward(const Variable& input) {
  return flatten(input);
}

}  // namespace tandem::nn
