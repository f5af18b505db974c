// comm's CUDA back end (comm/detail/gpu_backend.h), registered while
// libtandem loads.
#include "tandem/base/error.h"
#include "tandem/comm/cuda/collectives.h"
#include "tandem/comm/cuda/nccl_communicator.h"
#include "tandem/comm/cuda/nccl_library.h"
#include "tandem/comm/detail/gpu_backend.h"

namespace tandem::cuda {
namespace {

class CommCudaBackend final : public comm::detail::GpuBackend {
 public:
  bool nccl_available() override {
    try {
      nccl();
      return true;
    } catch (const Error&) {
      return false;
    }
  }
  std::string nccl_version() override { return cuda::nccl_version(); }
  std::vector<std::unique_ptr<comm::Communicator>> make_nccl_communicators(
      const std::vector<Device>& devices, const comm::CommOptions& options) override {
    return cuda::make_nccl_communicators(devices, options);
  }
  std::unique_ptr<comm::Communicator> make_nccl_communicator(
      comm::Communicator& bootstrap, Device device, const comm::CommOptions& options) override {
    return cuda::make_nccl_communicator(bootstrap, device, options);
  }
  void reduce_range(Device device, DType dtype, comm::ReduceOp op, float scale,
                    const void* const* inputs, int input_count, void* const* outputs,
                    int output_count, int64_t begin, int64_t end) override {
    const Reduction reduction = op == comm::ReduceOp::max   ? Reduction::max
                                : op == comm::ReduceOp::min ? Reduction::min
                                                            : Reduction::sum;
    cuda::reduce_range(device, dtype, reduction, scale, inputs, input_count, outputs, output_count,
                       begin, end);
  }
};

const bool registered = [] {
  static CommCudaBackend backend;
  comm::detail::register_gpu_backend(backend);
  return true;
}();

}  // namespace
}  // namespace tandem::cuda
