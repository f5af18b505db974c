#pragma once
// Private: the seam between comm and its GPU back end (CUDA's registers
// itself from comm/cuda/backend.cc when built): NCCL communicators and the
// in-process collectives' reduction over GPU memory. comm/nccl.cc and
// detail/reduce_kernels.cc call it and never include a back end's headers.

#include <memory>
#include <string>
#include <vector>

#include "tandem/comm/communicator.h"

namespace tandem::comm::detail {

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;

  // NCCL could be loaded, and its version ("not found" when it cannot).
  virtual bool nccl_available() = 0;
  virtual std::string nccl_version() = 0;
  // comm/nccl.h's NcclGroup and make_nccl_communicator.
  virtual std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(
      const std::vector<Device>& devices, const CommOptions& options) = 0;
  virtual std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap,
                                                               Device device,
                                                               const CommOptions& options) = 0;
  // detail/reduce_kernels.h's reduce_range_on_device (op: sum, max or min).
  virtual void reduce_range(Device device, DType dtype, ReduceOp op, float scale,
                            const void* const* inputs, int input_count, void* const* outputs,
                            int output_count, int64_t begin, int64_t end) = 0;
};

// The registered back end, or nullptr when this build has none.
GpuBackend* gpu_backend();

// The registered back end, or NotImplemented saying `what` needs a build with the
// CUDA back end.
GpuBackend& require_gpu_backend(const char* what);

// Called once by the back end, while its library code loads.
void register_gpu_backend(GpuBackend& backend);

}  // namespace tandem::comm::detail
