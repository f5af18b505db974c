#pragma once
// NCCL (NVIDIA's collective library) between ranks on distinct GPUs: the
// communicator of mirrored training over several GPUs of a process, and of
// one process per GPU across processes and hosts. Buffers live in device
// memory; each collective waits (on the device) for the kernels the calling
// thread queued before it, runs on the rank's communication stream, and
// returns when it has finished (Communicator's contract). NCCL cannot put
// two ranks on one GPU: virtual GPU devices use InProcessGroup.
// Beyond the contract: an invalid call fails on every rank without a
// cross-rank check, and a rank in another process that aborts is noticed
// by the others only when their timeout expires.

#include <memory>
#include <string>
#include <vector>

#include "tandem/comm/communicator.h"

namespace tandem::comm {

// True when this build has the CUDA backend and NCCL can be loaded.
bool nccl_available();

// NCCL's version ("2.28.3"), "not found" when it cannot be loaded, or "not
// built" without the CUDA backend (`tandem info`).
std::string nccl_version();

class NcclGroup {
 public:
  // One rank per device, in order; each a distinct GPU. Throws
  // InvalidArgument for a device that is not a GPU or shares one, and Error
  // when the build has no CUDA backend or NCCL cannot be loaded.
  explicit NcclGroup(const std::vector<Device>& devices, CommOptions options = {});
  ~NcclGroup();

  int size() const;
  // The communicator of `rank`, once (InvalidArgument on a second call).
  std::unique_ptr<Communicator> communicator(int rank);

 private:
  std::vector<std::unique_ptr<Communicator>> communicators_;
};

// This process's rank (bootstrap's rank) of a group spanning every rank of
// bootstrap, on `device`; collective over bootstrap.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, Device device,
                                                     CommOptions options = {});

}  // namespace tandem::comm
