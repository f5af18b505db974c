#include "tandem/comm/cuda/nccl_library.h"

#include <mutex>

#include "tandem/base/error.h"
#include "tandem/base/shared_library.h"

namespace tandem::cuda {

const Nccl& nccl() {
  static Nccl n{};
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    void* h = open_shared_library({"libnccl.so.2", "libnccl.so"});
    if (h == nullptr) {
      failure = std::string("cannot load NCCL (libnccl.so.2): ") + shared_library_error() +
                " (put the CUDA libraries on LD_LIBRARY_PATH)";
      return;
    }
    try {
      const char* name = "libnccl";
      bind_symbol(h, name, "ncclGetUniqueId", n.get_unique_id);
      bind_symbol(h, name, "ncclCommInitRank", n.comm_init_rank);
      bind_symbol(h, name, "ncclCommInitAll", n.comm_init_all);
      bind_symbol(h, name, "ncclCommDestroy", n.comm_destroy);
      bind_symbol(h, name, "ncclCommAbort", n.comm_abort);
      bind_symbol(h, name, "ncclCommGetAsyncError", n.comm_get_async_error);
      bind_symbol(h, name, "ncclGetErrorString", n.error_string);
      bind_symbol(h, name, "ncclAllReduce", n.all_reduce);
      bind_symbol(h, name, "ncclReduceScatter", n.reduce_scatter);
      bind_symbol(h, name, "ncclAllGather", n.all_gather);
      bind_symbol(h, name, "ncclBroadcast", n.broadcast);
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) TANDEM_THROW(Error, failure);
  return n;
}

std::string nccl_version() {
  void* h = open_shared_library({"libnccl.so.2", "libnccl.so"});
  if (h == nullptr) return "not found";
  try {
    int (*get)(int*) = nullptr;
    bind_symbol(h, "libnccl", "ncclGetVersion", get);
    int v = 0;
    return get(&v) == 0 ? dotted_version(static_cast<size_t>(v)) : "not found";
  } catch (const Error&) {
    return "not found";
  }
}

}  // namespace tandem::cuda
