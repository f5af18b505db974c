#pragma once
// cuBLASLt, cuDNN and NCCL, loaded when first used (dlopen) rather than
// linked: they are hundreds of megabytes (cuBLASLt 540 MB, NCCL 220 MB here)
// that every tandem process would map and partly touch at start, about
// 130 MB more resident memory in a run that never uses a GPU. Only their
// headers' types are used at build time.

#include <cublasLt.h>
#include <nccl.h>

#include <cstddef>
#include <string>

namespace tandem::cuda {

struct CublasLt {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtGetVersion) get_version;
  decltype(&cublasLtGetStatusName) status_name;
  decltype(&cublasLtGetStatusString) status_string;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutSetAttribute) layout_set;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmul) matmul;
};

// Loaded on first call; throws Error naming the library (and how to find
// it: LD_LIBRARY_PATH) when it cannot be loaded.
const CublasLt& cublaslt();

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

// As cublaslt(), for NCCL (libnccl.so.2).
const Nccl& nccl();

// "9.19.0", or "not found" when the library cannot be loaded.
std::string cublaslt_version();
std::string cudnn_version();
std::string nccl_version();

}  // namespace tandem::cuda
