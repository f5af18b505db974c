#pragma once
// Device dispatch of the public kernels: each entry point hands tensors on a
// CUDA device to its cuda:: implementation (tandem/kernels/cuda/kernels.h) before
// any host code touches them:
//   Tensor add(const Tensor& a, const Tensor& b) {
//     TANDEM_DISPATCH_CUDA(a, add(a, b));
//     ... the CPU kernel ...
// Kernels without a CUDA implementation need nothing: their host code reads
// through Tensor::raw_data/data, which refuse device memory with an error.

#include "tandem/config.h"
#include "tandem/tensor/tensor.h"
#if TANDEM_HAVE_CUDA
#include "tandem/kernels/cuda/kernels.h"
#endif

namespace tandem::kernels::detail {

inline bool on_cuda(const Tensor& x) {
  return x.defined() && x.device().kind == DeviceKind::cuda;
}

}  // namespace tandem::kernels::detail

// The kernels layer's one point of contact with whether the CUDA back end
// is built: TANDEM_CUDA_ONLY(statement) compiles the statement only then.
#if TANDEM_HAVE_CUDA
#define TANDEM_DISPATCH_CUDA(tensor, call) \
  if (::tandem::kernels::detail::on_cuda(tensor)) return ::tandem::cuda::call
#define TANDEM_CUDA_ONLY(statement) statement
#else
#define TANDEM_DISPATCH_CUDA(tensor, call) static_cast<void>(0)
#define TANDEM_CUDA_ONLY(statement) static_cast<void>(0)
#endif
