#include "tandem/comm/nccl.h"

#include "tandem/base/error.h"
#include "tandem/comm/detail/gpu_backend.h"

namespace tandem::comm {

bool nccl_available() {
  detail::GpuBackend* backend = detail::gpu_backend();
  return backend != nullptr && backend->nccl_available();
}

std::string nccl_version() {
  detail::GpuBackend* backend = detail::gpu_backend();
  return backend != nullptr ? backend->nccl_version() : "not built";
}

NcclGroup::NcclGroup(const std::vector<Device>& devices, CommOptions options)
    : communicators_(
          detail::require_gpu_backend("NCCL").make_nccl_communicators(devices, options)) {}

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
  return detail::require_gpu_backend("NCCL").make_nccl_communicator(bootstrap, device, options);
}

}  // namespace tandem::comm
