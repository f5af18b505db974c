#include "tandem/comm/nccl.h"

#include "tandem/base/error.h"
#include "tandem/config.h"
#if TANDEM_HAVE_CUDA
#include "tandem/comm/cuda/nccl_library.h"
#include "tandem/comm/cuda/nccl_communicator.h"
#endif

namespace tandem::comm {
#if !TANDEM_HAVE_CUDA
namespace {

[[noreturn]] void no_cuda() {
  TANDEM_THROW(Error, "NCCL: this build of tandem has no CUDA backend (TANDEM_WITH_CUDA)");
}

}  // namespace
#endif

bool nccl_available() {
#if TANDEM_HAVE_CUDA
  try {
    cuda::nccl();
    return true;
  } catch (const Error&) {
    return false;
  }
#else
  return false;
#endif
}

std::string nccl_version() {
#if TANDEM_HAVE_CUDA
  return cuda::nccl_version();
#else
  return "not built";
#endif
}

NcclGroup::NcclGroup(const std::vector<Device>& devices, CommOptions options) {
#if TANDEM_HAVE_CUDA
  communicators_ = cuda::make_nccl_communicators(devices, options);
#else
  static_cast<void>(devices);
  static_cast<void>(options);
  no_cuda();
#endif
}

NcclGroup::~NcclGroup() = default;

int NcclGroup::size() const {
  return static_cast<int>(communicators_.size());
}

std::unique_ptr<Communicator> NcclGroup::communicator(int rank) {
  if (rank < 0 || rank >= size() || !communicators_[static_cast<size_t>(rank)]) {
    TANDEM_THROW(InvalidArgument, "NCCL group of ", size(), ": no communicator left for rank ",
                 rank);
  }
  return std::move(communicators_[static_cast<size_t>(rank)]);
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, Device device,
                                                     CommOptions options) {
#if TANDEM_HAVE_CUDA
  return cuda::make_nccl_communicator(bootstrap, device, options);
#else
  static_cast<void>(bootstrap);
  static_cast<void>(device);
  static_cast<void>(options);
  no_cuda();
#endif
}

}  // namespace tandem::comm
