#pragma once
// The GPUs and CUDA library versions, for kernels::backend_info().

#include "tandem/kernels/backend_info.h"

namespace tandem::cuda {

void describe(kernels::BackendInfo& info);

}  // namespace tandem::cuda
