#pragma once
// NCCL communicators (comm/nccl.h is the public face): collectives between
// ranks on distinct GPUs, over NVLink/PCIe in a node and the network
// between nodes, on a communication stream per rank.

#include <memory>
#include <vector>

#include "tandem/comm/communicator.h"

namespace tandem::cuda {

// One communicator per device, all of this process (ncclCommInitAll); each
// device a distinct GPU.
std::vector<std::unique_ptr<comm::Communicator>> make_nccl_communicators(
    const std::vector<Device>& devices, const comm::CommOptions& options);

// This process's rank of a group spanning processes: NCCL's unique id is
// drawn on bootstrap's rank 0 and broadcast over bootstrap (MPI).
std::unique_ptr<comm::Communicator> make_nccl_communicator(comm::Communicator& bootstrap,
                                                           Device device,
                                                           const comm::CommOptions& options);

}  // namespace tandem::cuda
