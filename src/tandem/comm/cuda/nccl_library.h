#pragma once
// NCCL, loaded when first used (dlopen) rather than linked, as cuBLASLt and
// cuDNN are (kernels/cuda/libraries.h says why).

#include <nccl.h>

#include <string>

namespace tandem::cuda {

struct Nccl {
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRank) comm_init_rank;
  decltype(&ncclCommInitAll) comm_init_all;
  decltype(&ncclCommDestroy) comm_destroy;
  decltype(&ncclCommAbort) comm_abort;
  decltype(&ncclCommGetAsyncError) comm_get_async_error;
  decltype(&ncclGetErrorString) error_string;
  decltype(&ncclAllReduce) all_reduce;
  decltype(&ncclReduceScatter) reduce_scatter;
  decltype(&ncclAllGather) all_gather;
  decltype(&ncclBroadcast) broadcast;
};

// Loaded on first call; throws Error naming libnccl.so.2 (and
// LD_LIBRARY_PATH) when it cannot be loaded.
const Nccl& nccl();

// "2.28.3", or "not found" when the library cannot be loaded.
std::string nccl_version();

}  // namespace tandem::cuda
