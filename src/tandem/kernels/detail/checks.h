#pragma once
// Operand checks shared by every device's implementation of a kernel: a
// public kernel checks its operands once, before it dispatches on the
// device (detail/dispatch.h), and each device's code then only computes.
// What a device's code still checks is its own limit (a CUDA grid's size,
// a layout only its forward writes) or memory it indexes.

#include <cstdint>
#include <initializer_list>

#include "tandem/base/error.h"
#include "tandem/tensor/tensor.h"

namespace tandem::kernels::detail {

// Every defined tensor must be in `first`'s memory: on its GPU, or on the
// host (the virtual CPU devices share it, and their replicas' tensors meet
// in kernels: a label batch on cpu:0 with logits on cpu:1).
inline void check_same_device(const char* op, const Tensor& first,
                              std::initializer_list<const Tensor*> others) {
  const bool host = first.device().kind == DeviceKind::cpu;
  for (const Tensor* t : others) {
    if (!t->defined()) continue;
    const bool same = host ? t->device().kind == DeviceKind::cpu : t->device() == first.device();
    if (!same) {
      TANDEM_THROW(InvalidArgument, op, ": operands on ", first.device().to_string(), " and ",
                   t->device().to_string(), " (move one with Tensor::to(Device))");
    }
  }
}

// A kernel over the rows of the last dimension needs one.
inline void check_rows(const char* op, const Tensor& x) {
  if (x.rank() < 1) TANDEM_THROW(ShapeError, op, " needs rank >= 1, got a scalar");
}

// Two operands of one shape and dtype, on one device.
inline void check_matching(const char* op, const Tensor& a, const Tensor& b) {
  check_same_device(op, a, {&b});
  if (b.shape() != a.shape() || b.dtype() != a.dtype()) {
    TANDEM_THROW(ShapeError, op, ": operands differ: ", a.to_string(), " and ", b.to_string());
  }
}

// i32 indices, each in [0, bound); the message names the first bad one as
// "<what> <value> at <where> <i>" ("index 7 at position 3"). Reads them back
// from a device (a synchronisation).
inline void check_index_values(const char* op, const Tensor& indices, int64_t bound,
                               const char* what, const char* where) {
  if (indices.dtype() != DType::i32) {
    TANDEM_THROW(ShapeError, op, ": ", what, " values must be i32, got ", indices.to_string());
  }
  // The host's indices in place; a device's read back once.
  const Tensor host = indices.on_host();
  const int32_t* values = host.data<int32_t>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    if (values[i] < 0 || values[i] >= bound) {
      TANDEM_THROW(InvalidArgument, op, ": ", what, " ", values[i], " at ", where, " ", i,
                   " is outside [0, ", bound, ")");
    }
  }
}

}  // namespace tandem::kernels::detail
