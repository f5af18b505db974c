#pragma once
// Operand checks shared by the CUDA kernels (host code).

#include <initializer_list>

#include "tandem/base/error.h"
#include "tandem/tensor/tensor.h"

namespace tandem::cuda {

// Every defined tensor must be on `first`'s device.
inline void check_same_device(const char* op, const Tensor& first,
                              std::initializer_list<const Tensor*> others) {
  for (const Tensor* t : others) {
    if (t->defined() && t->device() != first.device()) {
      TANDEM_THROW(InvalidArgument, op, ": operands on ", first.device().to_string(), " and ",
                   t->device().to_string(), " (move one with Tensor::to(Device))");
    }
  }
}

}  // namespace tandem::cuda
